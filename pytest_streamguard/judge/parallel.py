"""Judging many streams at once (a load's) on every core: :func:`judge_traces`.

What judging costs is the client's own code: the ``openai`` client builds a pydantic model of
every event it yields (profiled: over 80% of a judge's time is the client's own stream
iterator), and that work cannot be made cheaper without judging with something other than the
client. So a load's streams are judged after the load, off its hot path, in this process and
in judging processes on the other cores at once (a ``ProcessPoolExecutor`` of ``spawn``
processes). The pool is started by the first load it judges, never while a load runs (a fresh
interpreter importing the client would take the CPU the load's reading needs: in one run of a
30-stream load of 50 ms gaps on a busy 2-core machine, a pool spawned as the load started put
its p95 gap at 225 ms), and kept, idle between loads, until the pytest session ends
(:func:`shutdown`). The work is shared out in small batches, taken from both ends of one queue
(this process from the front, the pool from the back), so neither waits on the other.

Only the built-in judges go to the pool (a judge the user registered lives in this process);
a batch the pool fails on is judged here. Every verdict is ruled here, in the streams' order,
exactly as :func:`~pytest_streamguard.judge.ruling.judge_trace` rules one stream.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import multiprocessing
import os
import threading

from pytest_streamguard.judge.base import ClientJudge, Conclusion
from pytest_streamguard.judge.registry import JUDGES, is_builtin
from pytest_streamguard.judge.ruling import judge_of, settle
from pytest_streamguard.stream.recorded import Recorded
from pytest_streamguard.stream.trace import StreamTrace

#: Fewer streams than this are judged in this process alone (a pool would not pay).
PARALLEL_MIN = 16
#: Streams per batch handed to the pool (about 0.1 s of the openai client's work).
BATCH = 8

_lock = threading.Lock()
_pool: concurrent.futures.ProcessPoolExecutor | None = None


def judging_workers() -> int:
    """How many judging processes: one per core this process may use but its own."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return max(cores - 1, 0)


def judge_traces(traces: list[StreamTrace], choice: str) -> None:
    """Judge every trace by the client ``choice`` names for its format and rule on it, as
    :func:`~pytest_streamguard.judge.ruling.judge_trace` does one by one, sharing the work
    with the judging pool where there is one and enough streams."""
    work: list[tuple[StreamTrace, ClientJudge]] = []
    for trace in traces:
        judge = judge_of(trace, choice)
        if judge is not None:
            work.append((trace, judge))
    pool = _judging_pool() if len(work) >= PARALLEL_MIN else None
    if pool is None:
        conclusions = [_conclude(judge, trace) for trace, judge in work]
    else:
        conclusions = _shared(work, pool)
    for (trace, _), conclusion in zip(work, conclusions, strict=True):
        settle(trace, conclusion)


def _conclude(judge: ClientJudge, trace: StreamTrace) -> Conclusion:
    assert trace.recorded is not None
    return judge.judge(trace.recorded)


def _shared(
    work: list[tuple[StreamTrace, ClientJudge]], pool: concurrent.futures.ProcessPoolExecutor
) -> list[Conclusion]:
    """The conclusions on ``work``, batches judged here from the front of the queue and in
    ``pool`` from its back (one batch in flight per judging process)."""
    found: list[Conclusion | None] = [None] * len(work)
    batches = collections.deque(range(0, len(work), BATCH))

    def here(start: int) -> None:
        for index in range(start, min(start + BATCH, len(work))):
            found[index] = _conclude(work[index][1], work[index][0])

    def remote() -> None:
        while True:
            try:
                start = batches.pop()
            except IndexError:
                return
            part = work[start : start + BATCH]
            if not all(is_builtin(judge) for _, judge in part):
                here(start)
                continue
            sent = [(judge.name, trace.recorded) for trace, judge in part]
            try:
                got = pool.submit(judge_batch, sent).result()
            except Exception:  # a broken pool: judged here instead, never lost
                here(start)
                continue
            found[start : start + len(got)] = got

    helpers = [threading.Thread(target=remote, daemon=True) for _ in range(judging_workers())]
    for helper in helpers:
        helper.start()
    while True:
        try:
            start = batches.popleft()
        except IndexError:
            break
        here(start)
    for helper in helpers:
        helper.join()
    assert all(conclusion is not None for conclusion in found)
    return [conclusion for conclusion in found if conclusion is not None]


def judge_batch(batch: list[tuple[str, Recorded | None]]) -> list[Conclusion]:
    """In a judging process: each recorded response judged by the built-in judge named."""
    conclusions = []
    for name, recorded in batch:
        assert recorded is not None
        conclusions.append(JUDGES[name].judge(recorded))
    return conclusions


def _judging_pool() -> concurrent.futures.ProcessPoolExecutor | None:
    """The session's judging pool, started on first use; None on a single core."""
    global _pool
    workers = judging_workers()
    if workers == 0:
        return None
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ProcessPoolExecutor(
                workers,
                mp_context=multiprocessing.get_context("spawn"),
            )
            atexit.register(shutdown)
        return _pool


def shutdown() -> None:
    """Stop the judging pool, if one was started (the plugin does so as pytest ends)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
