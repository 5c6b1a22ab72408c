"""Faults that signal the target's process group: ``freeze`` and ``restart``.

This module owns the two faults that act on the target process the plugin started, not on the
proxy: :class:`Freeze` (SIGSTOP to its whole process group, SIGCONT some seconds later: a
blocked event loop, on any app) and :class:`Restart` (SIGKILL, then its command started again on
the same port). Both act right away or once a stream of the test has N chunks, as the client
reads them (:class:`ProcessSignal`), and this module keeps no target stopped past the run: a
frozen group is continued at exit whatever happens (Ctrl-C, a crash).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from abc import abstractmethod
from typing import TYPE_CHECKING

from pytest_streamguard.faults.mechanism import Mechanism, checked_number
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

if TYPE_CHECKING:
    from pytest_streamguard.services.app import Target

# Process groups stopped by a freeze right now: continued at exit whatever happens (Ctrl-C, a
# crash), so no target is ever left stopped.
_FROZEN: set[int] = set()
_FROZEN_LOCK = threading.Lock()


def _continue(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGCONT)
    with _FROZEN_LOCK:
        _FROZEN.discard(pgid)


@atexit.register
def _continue_all() -> None:
    for pgid in list(_FROZEN):
        _continue(pgid)


class ProcessSignal(Mechanism):
    """A fault that signals the target's process group, right away or once a stream of the
    test has ``after_chunks`` chunks (once per call: the first stream there sets it off)."""

    def __init__(self, record: FaultRecord, after_chunks: int | None) -> None:
        super().__init__(record)
        self.after_chunks = after_chunks
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.hit: StreamTrace | None = None

    @abstractmethod
    def start(self) -> None:
        """Signal the group now."""

    @property
    def waiting(self) -> bool:
        """Whether it waits for this process's reader to see chunk N (not set off yet)."""
        return self.after_chunks is not None and self.hit is None

    @property
    def triggered(self) -> list[StreamTrace]:
        """The stream that reached the chunk (none for a signal sent at once)."""
        return [self.hit] if self.hit is not None else []

    def on_chunk(self, trace: StreamTrace) -> None:
        """Set the fault off when the first stream reaches chunk N."""
        if self.after_chunks is None or self.hit is not None:
            return
        if len(trace.chunks) >= self.after_chunks:
            self.hit = trace
            self.start()

    def on_end(self, trace: StreamTrace) -> None:
        """The signal's effect lasts whatever the streams do."""


class Freeze(ProcessSignal):
    """``freeze(seconds, after_chunks)``: SIGSTOP to the target's process group (its whole
    group: workers included), SIGCONT ``seconds`` later."""

    def __init__(
        self, record: FaultRecord, pgid: int, after_chunks: int | None, seconds: float
    ) -> None:
        super().__init__(record, after_chunks)
        self.pgid = pgid
        self.seconds = seconds
        self.cancel = threading.Event()

    def apply(self) -> None:
        """Stop the group now, unless it waits for chunk N."""
        if self.after_chunks is not None:
            return
        self.start()
        if self.error is not None:
            raise ValueError(
                f"faults.freeze(): could not stop the target's process group "
                f"{self.pgid}: {self.error}"
            )

    def start(self) -> None:
        """Stop the group now (in this thread, so the stop is in place when this returns)
        and continue it from a thread after the seconds."""
        with _FROZEN_LOCK:
            _FROZEN.add(self.pgid)
        try:
            os.killpg(self.pgid, signal.SIGSTOP)
        except OSError as exc:
            _continue(self.pgid)
            self.error = exc
            return
        self.record.on_ns = time.perf_counter_ns()
        self.thread = threading.Thread(target=self._run, name="streamguard-freeze", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.cancel.wait(self.seconds)
        finally:
            _continue(self.pgid)
            self.record.off_ns = time.perf_counter_ns()

    def remove(self) -> list[str]:
        """Continue the group now if its seconds are not over."""
        self.cancel.set()
        if self.thread is not None:
            self.thread.join(5)
        _continue(self.pgid)
        if self.record.on_ns is not None and self.record.off_ns is None:
            self.record.off_ns = time.perf_counter_ns()
        return [] if self.error is None else [f"{self.record.kind}: {self.error}"]


class Restart(ProcessSignal):
    """``restart(after_chunks)``: SIGKILL to the target's process group (a crash: its open
    connections end), then the same command started again on the same port, in a thread.
    ``on_ns`` is the kill, ``off_ns`` when the target answered its ready path again."""

    def __init__(self, record: FaultRecord, target: Target, after_chunks: int | None) -> None:
        super().__init__(record, after_chunks)
        self.target = target

    def apply(self) -> None:
        """Restart the target now (returning once it is ready again), unless it waits for
        chunk N."""
        if self.after_chunks is not None:
            return
        self.start()
        self.wait()
        if self.error is not None:
            raise ValueError(f"faults.restart(): {self.error}")

    def start(self) -> None:
        """Kill the group now (in this thread: the streams in flight are cut right here) and
        start the target again from a thread."""
        self.target.kill()
        self.record.on_ns = time.perf_counter_ns()
        self.thread = threading.Thread(target=self._run, name="streamguard-restart", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.target.restart()
        except BaseException as exc:  # reported by remove(), when the test's faults are undone
            self.error = exc
        finally:
            self.record.off_ns = time.perf_counter_ns()

    def wait(self) -> None:
        """Return once a restart under way is over (the target is ready, or failed to be)."""
        if self.thread is not None:
            self.thread.join(self.target.startup_timeout + 10)

    def remove(self) -> list[str]:
        """Wait for a restart under way; say if the target did not start again."""
        self.wait()
        return [] if self.error is None else [f"{self.record.kind}: {self.error}"]


def freeze_fault(seconds: float, after_chunks: int | None, pid: int | None) -> Freeze:
    """``freeze``: its arguments checked, for the target process ``pid`` (None: a target
    given by URL, which cannot be frozen)."""
    checked_number("freeze", "seconds", seconds, minimum=0)
    if seconds <= 0:
        raise ValueError(f"faults.freeze(seconds={seconds!r}): expected a number > 0")
    if after_chunks is not None:
        checked_number("freeze", "after_chunks", after_chunks, minimum=1, integer=True)
    if pid is None:
        raise ValueError(
            "faults.freeze() stops the target process the plugin started, but this run's "
            "target is given by URL (--streamguard-target-url): start it with "
            "--streamguard-target-cmd (or use the bundled target) to freeze it"
        )
    record = FaultRecord(
        kind="freeze",
        params={"seconds": seconds, "after_chunks": after_chunks},
        toxics=[],
        armed_ns=time.perf_counter_ns(),
        applied_by="client",
    )
    return Freeze(record, pid, None if after_chunks is None else int(after_chunks), float(seconds))


def restart_fault(target: Target | None, after_chunks: int | None) -> Restart:
    """``restart``: its arguments checked, for the ``target`` the plugin started (None: a
    target given by URL, which cannot be restarted)."""
    if after_chunks is not None:
        checked_number("restart", "after_chunks", after_chunks, minimum=1, integer=True)
    if target is None or target.process is None:
        raise ValueError(
            "faults.restart() kills and starts again the target process the plugin "
            "started, but this run's target is given by URL (--streamguard-target-url): "
            "start it with --streamguard-target-cmd (or use the bundled target) to "
            "restart it"
        )
    record = FaultRecord(
        kind="restart",
        params={} if after_chunks is None else {"after_chunks": after_chunks},
        toxics=[],
        armed_ns=time.perf_counter_ns(),
        applied_by="client",
    )
    return Restart(record, target, None if after_chunks is None else int(after_chunks))
