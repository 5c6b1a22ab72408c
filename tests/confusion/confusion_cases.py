"""The confusion set's cases: each app of tests/confusion/apps/ with its incident (or none), the
test a user would run on it, and the findings that incident should get.

The test bodies are what a team writes: a guarded load (the probe on, as by default) or a few
streams, with no threshold of their own; ``CHAT(tokens)`` is an OpenAI chat request. Where
today's rules cannot name the incident, ``missing`` names the rule it needs.
"""

from __future__ import annotations

import pytest
from confusion import Case, Misjudged

PATH = '"/v1/chat/completions"'


def load(n: int, tokens: int, extra: str = "") -> str:
    """A load of ``n`` streams of ``tokens`` tokens; every stream must complete."""
    return (
        f"result = streamguard.load({n}, {PATH}, json=CHAT({tokens}){extra})\n"
        f"assert result.completed == {n}, result.summary()\n"
    )


def soak(n: int, rate: float, tokens: int) -> str:
    """An open-loop soak: ``n`` requests at ``rate`` per second (some open at any instant)."""
    return (
        f"result = streamguard.load({n}, {PATH}, json=CHAT({tokens}), rate={rate})\n"
        f"assert result.completed == {n}, result.summary()\n"
    )


# One stream first (the deploy's first user), then the traffic that follows.
FIRST_THEN_LOAD = f"""
first = streamguard.stream({PATH}, json=CHAT(8))
assert first.completed, first.error
result = streamguard.load(4, {PATH}, json=CHAT(8))
assert result.completed == 4, result.summary()
"""


def one_stream(tokens: int, completed: bool = True) -> str:
    """One stream, expected to complete or to be cut short."""
    check = "trace.completed, trace.error" if completed else "not trace.completed, trace.summary()"
    return f"trace = streamguard.stream({PATH}, json=CHAT({tokens}))\nassert {check}\n"


# The client goes away after its first kilobytes (a user closing the tab).
CUT_EARLY = f"""
streamguard.faults.cut(after_bytes=1500)
trace = streamguard.stream({PATH}, json=CHAT(300), read_timeout=5.0)
assert trace.error_kind == "cut", trace.error
"""

STARLETTE = "Starlette/uvicorn"
FASTAPI = "FastAPI/uvicorn"
THREADED = "http.server threads"
NODE = "Node node:http"
NGINX = "nginx + Starlette"


def app(script: str, incident: str = "healthy") -> tuple[str, ...]:
    return (script, "--incident", incident)


S, F, T, N = "starlette_chat.py", "fastapi_chat.py", "threaded_chat.py", "node_chat.js"
BLOCKED = frozenset({"blocked_loop"})

CAUSES = [
    Case(
        "starlette-blocked-loop", STARLETTE, "cause", app(S, "blocked_loop"), load(5, 15), BLOCKED
    ),
    Case("node-blocked-loop", NODE, "cause", app(N, "blocked_loop"), load(5, 15), BLOCKED),
    Case("starlette-busy-loop", STARLETTE, "cause", app(S, "busy_loop"), load(5, 15), BLOCKED),
    Case("starlette-staircase", STARLETTE, "cause", app(S, "staircase"), load(8, 8), BLOCKED),
    Case(
        "starlette-soak-blocked-loop",
        STARLETTE,
        "cause",
        app(S, "blocked_loop"),
        soak(24, 12.0, 6),
        BLOCKED,
    ),
    # The deadline's read limit (1.05 s) ends the streams during the blocks: the plugin's own
    # client gave up, no ingress cut them.
    Case(
        "starlette-blocked-loop-deadline",
        STARLETTE,
        "cause",
        app(S, "blocked_loop"),
        f"streamguard.load(10, {PATH}, json=CHAT(15))",
        BLOCKED,
        marker="ttft=0.5, chunk=0.05",
        user_test_passes=False,
    ),
    Case(
        "fastapi-cold-start",
        FASTAPI,
        "cause",
        app(F, "cold_start"),
        FIRST_THEN_LOAD,
        frozenset({"cold_start"}),
    ),
    Case(
        "threaded-cold-start",
        THREADED,
        "cause",
        app(T, "cold_start"),
        FIRST_THEN_LOAD,
        frozenset({"cold_start"}),
    ),
    Case(
        "nginx-idle-cut",
        NGINX,
        "cause",
        app(S, "tool_pause"),
        one_stream(30, completed=False),
        frozenset({"idle_cut"}),
        ingress=("--read-timeout", "1"),
    ),
    Case(
        "nginx-idle-cut-quick",
        NGINX,
        "cause",
        app(S, "quick_tool"),
        one_stream(8, completed=False),
        frozenset({"idle_cut"}),
        ingress=("--read-timeout", "1"),
    ),
    Case(
        "nginx-buffering",
        NGINX,
        "cause",
        app(S),
        one_stream(30),
        frozenset({"buffered"}),
        ingress=("--buffering", "--gzip"),
    ),
    Case(
        "starlette-held-open",
        STARLETTE,
        "cause",
        app(S, "held_open"),
        one_stream(8),
        frozenset({"held_open"}),
    ),
    Case(
        "node-held-open",
        NODE,
        "cause",
        app(N, "held_open"),
        one_stream(8),
        frozenset({"held_open"}),
    ),
    Case(
        "fastapi-not-cancelled",
        FASTAPI,
        "cause",
        app(F, "not_cancelled"),
        CUT_EARLY,
        frozenset({"not_cancelled"}),
    ),
    Case(
        "node-total-timeout",
        NODE,
        "cause",
        app(N, "total_timeout"),
        'result = streamguard.load(4, "/v1/chat/completions", json=CHAT(100))\n'
        "assert result.completed == 0, result.summary()\n",
        frozenset({"total_timeout"}),
    ),
    Case(
        "node-bursts",
        NODE,
        "cause",
        app(N, "bursts"),
        load(3, 150),
        frozenset({"bursts"}),
    ),
]

# The plugin's own faults on a healthy app: a stall of the proxy in the middle of one stream,
# and the app's process frozen half a second under a load.
OWN_STALL = f"""
streamguard.faults.stall(after_chunks=5, seconds=1.0)
trace = streamguard.stream({PATH}, json=CHAT(20))
assert trace.completed, trace.error
"""
OWN_FREEZE = f"""
streamguard.faults.freeze(0.6, after_chunks=5)
result = streamguard.load(5, {PATH}, json=CHAT(30))
assert result.completed == 5, result.summary()
"""

LOOK_ALIKES = [
    Case(
        "fastapi-one-slot",
        FASTAPI,
        "look-alike",
        app(F, "one_slot"),
        load(5, 15),
        frozenset({"queued"}),
    ),
    Case(
        "threaded-one-slot",
        THREADED,
        "look-alike",
        app(T, "one_slot"),
        load(5, 15),
        frozenset({"queued"}),
    ),
    Case(
        "node-one-slot", NODE, "look-alike", app(N, "one_slot"), load(5, 15), frozenset({"queued"})
    ),
    Case(
        "fastapi-batching",
        FASTAPI,
        "look-alike",
        app(F, "batching"),
        load(10, 20),
        frozenset({"queued"}),
    ),
    Case("fastapi-long-steady", FASTAPI, "look-alike", app(F), load(2, 120)),
    Case("starlette-soak", STARLETTE, "look-alike", app(S), soak(24, 12.0, 30)),
    Case("fastapi-slow-healthy", FASTAPI, "look-alike", app(F, "slow"), load(5, 12)),
    Case("fastapi-cancelled", FASTAPI, "look-alike", app(F, "cancelled"), CUT_EARLY),
    Case(
        "starlette-own-stall",
        STARLETTE,
        "look-alike",
        app(S),
        OWN_STALL,
    ),
    Case("starlette-own-freeze", STARLETTE, "look-alike", app(S), OWN_FREEZE),
    Case(
        "nginx-tool-pause",
        NGINX,
        "look-alike",
        app(S, "tool_pause"),
        one_stream(30),
        ingress=("--read-timeout", "10"),
    ),
]

CONTROLS = [
    Case("starlette-healthy", STARLETTE, "control", app(S), load(5, 15)),
    Case("fastapi-healthy", FASTAPI, "control", app(F), load(5, 15)),
    Case("threaded-healthy", THREADED, "control", app(T), load(5, 15)),
    Case("node-healthy", NODE, "control", app(N), load(5, 15)),
    Case("nginx-healthy", NGINX, "control", app(S), load(5, 15), ingress=()),
]

CASES = [*CAUSES, *LOOK_ALIKES, *CONTROLS]


def marks(case: Case) -> list[pytest.MarkDecorator]:
    """A case whose cause needs a rule today's findings lack is expected to be misjudged
    (strictly: it fails once the rule lands); one they misjudge in some runs only may be."""
    if case.missing:
        return [pytest.mark.xfail(strict=True, raises=Misjudged, reason=case.missing)]
    if case.intermittent:
        return [pytest.mark.xfail(strict=False, raises=Misjudged, reason=case.intermittent)]
    return []


def as_params(cases: list[Case]) -> list[object]:
    """The cases as pytest parameters, each named by its case and marked by :func:`marks`."""
    return [pytest.param(case, id=case.name, marks=marks(case)) for case in cases]
