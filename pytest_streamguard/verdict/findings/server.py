"""What the target showed from its side: ``not_cancelled`` (its engine still generated after
the client was cut), read from the bundled target's gauges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.verdict.findings.base import Finding, Observed
from pytest_streamguard.verdict.findings.base import seconds as _s
from pytest_streamguard.verdict.findings.ends import CUT_KINDS as _CUT_KINDS

#: not_cancelled: generation still running this many seconds after a cut stream ended (the
#: target's engine still generating requests no open stream holds).
NOT_CANCELLED_AFTER_S = 1.0


#: The findings read from the target's side, not from the streams alone (a test record keeps
#: them beside what :func:`findings_of` reads from its traces).
SERVER_SIDE = frozenset({"not_cancelled"})

#: The bundled target's gauges :func:`not_cancelled` reads: requests its engine still
#: generates for, and streams that hold a slot (an open client connection).
ENGINE_GAUGE = "streamguard_target_engine_requests"
OPEN_GAUGE = "streamguard_target_active_streams"


def target_gauges(
    url: str, timeout: float = 2.0, attempts: int = 3
) -> Callable[[], tuple[float, float] | None]:
    """A reader of the target's engine requests and open streams (``GET url/metrics``, the
    bundled target's gauges); it returns None for a target that does not export both, or
    that did not answer in ``attempts`` tries of ``timeout`` seconds each (a target busy
    generating on a loaded machine once took over 1 s to answer, and a single try read that
    as a target without gauges)."""

    def read() -> tuple[float, float] | None:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        for attempt in range(attempts):
            try:
                response = httpx.get(
                    url.rstrip("/") + "/metrics", timeout=timeout, verify=tls_context()
                )
                response.raise_for_status()
                families = {f.name: f for f in text_string_to_metric_families(response.text)}
                engine, open_ = families[ENGINE_GAUGE], families[OPEN_GAUGE]
                return float(engine.samples[0].value), float(open_.samples[0].value)
            except httpx.TransportError:
                if attempt == attempts - 1:
                    return None
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                return None
        return None

    return read


def _cut_for_good(trace: Observed) -> bool:
    """A stream whose connection the client side ended: cut, reset, a network error or a
    timeout, but not one held in a blackhole (the server cannot learn of that one)."""
    if trace.completed or trace.error_kind not in _CUT_KINDS or not trace.end_ns:
        return False
    end = trace.end_ns
    return not any(
        f.kind == "blackhole" and f.active_during(trace.request_ns, end)
        for f in getattr(trace, "faults", ())
    )


def not_cancelled(
    traces: Sequence[Observed],
    gauges: Callable[[], tuple[float, float] | None],
    *,
    after_s: float = NOT_CANCELLED_AFTER_S,
) -> Finding | None:
    """``not_cancelled``: once every stream of ``traces`` has ended and at least one was cut
    (``cut``, ``reset``, ``timeout``, ``network``, ``truncated``; not in a blackhole), the
    target's engine still generated ``after_s`` seconds after the last cut (``gauges``: the
    engine's requests and the open streams, see :func:`target_gauges`; only meaningful for a
    target no other client uses, such as the one the plugin started). Waits until then at
    most, and not at all once the engine is idle or the target exports neither gauge."""
    cut = [t for t in traces if _cut_for_good(t)]
    if not cut or any(t.end_ns is None for t in traces):
        return None
    last = max(t.end_ns for t in cut if t.end_ns is not None)
    until = last + int(after_s * 1e9)
    while True:
        read = gauges()
        if read is None:
            return None
        engine, open_ = read
        now = time.perf_counter_ns()
        if engine <= 0:
            return None
        if now >= until:
            break
        time.sleep(min(0.05, (until - now) / 1e9))
    since = _s(now - last)
    return Finding(
        "not_cancelled",
        f"generation still running {since:.3f} s after the cut: the target's engine had "
        f"{engine:g} {'request' if engine == 1 else 'requests'} and {open_:g} open "
        f"{'stream' if open_ == 1 else 'streams'} after every stream of the test had ended",
        tuple(t.name for t in cut),
        {"after_s": since, "engine_requests": engine, "open_streams": open_},
    )


def kept_going_at(traces: Sequence[Observed], order: Sequence[str], engine: str) -> str:
    """Which service of a stack (``order``: start order, the entry last) kept generation going
    after a cut, given that ``engine``'s gauges said so: ``engine`` itself, unless on every
    cut stream the tap paired on that hop the service in front did not close the connection to
    it (it did not pass the client's going away on): then that service, and so on toward the
    entry."""
    cut = [t for t in traces if _cut_for_good(t)]
    at = list(order).index(engine)
    while at + 1 < len(order):
        name = order[at]
        stacks = [s for t in cut if (s := getattr(t, "stack", None)) and s.inner.get(name)]
        if not stacks or any(s.ended.get(name) == "front" for s in stacks):
            break
        at += 1
    return order[at]
