"""The stacks' confusion cases: each stack of tests/confusion/stacks/ with one cause placed on
one hop (or none), the test a user would run on it, and the findings, with their hops, that the
cause should get.

Three stacks, in start order (the entry last):

- a Node gateway (``node:http``, piping) in front of a FastAPI model server (an engine task
  and a queue, Prometheus gauges);
- a Starlette gateway (httpx, re-sending the answer's SSE lines as it reads them, forwarding
  ``traceparent``) in front of a threaded ``http.server`` model server (chunked by hand);
- nginx (configured for SSE, its error log on stderr) in front of the first stack.

The causes: a blocked event loop, a server exception mid-stream, a gateway's upstream read
timeout (a cut, or 504s), a buffering hop (a gateway, nginx, or a model that answers in one
piece), generation not cancelled when the client goes away (by the model, or by a gateway that
does not pass the close on). The look-alikes and controls are the same stacks without a cause,
or with the plugin's own fault. The test bodies assert what the cause does to the streams, so a
case whose cause did not happen fails as such, not as a misjudgement.
"""

from __future__ import annotations

import pytest
from stack_confusion import Misjudged, Service, StackCase

PATH = '"/v1/chat/completions"'


def load(n: int, tokens: int) -> str:
    """``n`` streams at once, every one of which must complete."""
    return (
        f"result = streamguard.load({n}, {PATH}, json=CHAT({tokens}))\n"
        f"assert result.completed == {n}, result.summary()\n"
    )


def broken(n: int, tokens: int) -> str:
    """``n`` streams at once under a generous deadline, none of which completes (the cause
    ends them): the deadline fails the user's test, with the verdict's likely cause."""
    return (
        f"result = streamguard.load({n}, {PATH}, json=CHAT({tokens}))\n"
        f"assert result.completed == 0, result.summary()\n"
    )


#: The deadline of a test whose streams the cause ends: only their ending breaks it.
DEADLINE = "ttft=2.0, chunk=2.0"


def one_stream(tokens: int) -> str:
    """One stream that completes."""
    stream = f"trace = streamguard.stream({PATH}, json=CHAT({tokens}))\n"
    return stream + "assert trace.completed, trace.error\n"


# The client goes away after its first kilobytes (a user closing the tab), with generation of
# 150 tokens (3 s) still to come.
CLIENT_LEAVES = f"""
streamguard.faults.cut(after_bytes=1500)
trace = streamguard.stream({PATH}, json=CHAT(150), read_timeout=5.0)
assert trace.error_kind == "cut", trace.error
"""

# The plugin's own stall on the model's hop: the model's tokens are held 0.8 s after its 4th
# event, then arrive together.
OWN_STALL = f"""
streamguard.hop("model").faults.stall(after_chunks=4, seconds=0.8)
trace = streamguard.stream({PATH}, json=CHAT(20))
assert trace.completed, trace.error
"""


def node_fastapi(model: str = "", gateway: str = "") -> tuple[Service, ...]:
    return (
        Service("model", "fastapi_model.py", model),
        Service("gateway", "node_gateway.js", f"--upstream {{model}} {gateway}"),
    )


def starlette_threaded(model: str = "", gateway: str = "") -> tuple[Service, ...]:
    return (
        Service("model", "threaded_model.py", model),
        Service("gateway", "starlette_gateway.py", f"--upstream {{model}} {gateway}"),
    )


def nginx_node_fastapi(
    model: str = "", ingress: str = "", gateway: str = ""
) -> tuple[Service, ...]:
    return (
        *node_fastapi(model, gateway),
        Service("ingress", "nginx_ingress.py", f"--upstream {{gateway}} {ingress}"),
    )


NF = "Node gw -> FastAPI model"
ST = "Starlette gw -> threaded model"
XNF = "nginx -> Node gw -> FastAPI model"


def at(*pairs: str) -> frozenset[tuple[str, str]]:
    """``"idle_cut@gateway"`` as ``("idle_cut", "gateway")``."""
    return frozenset((name, hop) for name, hop in (p.split("@") for p in pairs))


CAUSES = [
    StackCase(
        "nf-model-blocked-loop",
        NF,
        "cause",
        node_fastapi(model="--incident blocked_loop"),
        load(4, 12),
        at("blocked_loop@model"),
    ),
    StackCase(
        "nf-model-error",
        NF,
        "cause",
        node_fastapi(model="--incident error"),
        broken(3, 12),
        at("server_error@model"),
        marker=DEADLINE,
        user_test_passes=False,
        said="DeviceError",
    ),
    StackCase(
        "nf-gateway-read-timeout",
        NF,
        "cause",
        node_fastapi(
            model="--incident pause --pause-s 0.9",
            gateway="--incident read_timeout --timeout-ms 400",
        ),
        broken(4, 12),
        at("idle_cut@gateway"),
        marker=DEADLINE,
        user_test_passes=False,
    ),
    StackCase(
        "nf-gateway-buffer",
        NF,
        "cause",
        node_fastapi(gateway="--incident buffer"),
        one_stream(20),
        at("buffered@gateway"),
    ),
    StackCase(
        "nf-model-not-cancelled",
        NF,
        "cause",
        node_fastapi(model="--incident not_cancelled"),
        CLIENT_LEAVES,
        at("not_cancelled@model"),
    ),
    StackCase(
        "nf-gateway-no-cancel",
        NF,
        "cause",
        node_fastapi(gateway="--incident no_cancel"),
        CLIENT_LEAVES,
        at("not_cancelled@gateway"),
    ),
    StackCase(
        "st-gateway-blocked-loop",
        ST,
        "cause",
        starlette_threaded(gateway="--incident blocked_loop"),
        load(4, 12),
        at("blocked_loop@gateway"),
    ),
    StackCase(
        "st-model-error",
        ST,
        "cause",
        starlette_threaded(model="--incident error"),
        broken(3, 12),
        at("server_error@model"),
        marker=DEADLINE,
        user_test_passes=False,
        # The gateway's own traceback of the break (httpx's RemoteProtocolError).
        allowed=at("server_error@gateway"),
        said="KeyError: 6",
    ),
    StackCase(
        "st-gateway-error",
        ST,
        "cause",
        starlette_threaded(gateway="--incident meter_error"),
        broken(3, 12),
        at("server_error@gateway"),
        marker=DEADLINE,
        user_test_passes=False,
        said="KeyError: 'usage'",
    ),
    StackCase(
        "st-model-one-piece",
        ST,
        "cause",
        starlette_threaded(model="--incident one_piece"),
        one_stream(20),
        at("buffered@model"),
    ),
    StackCase(
        "st-gateway-buffer",
        ST,
        "cause",
        starlette_threaded(gateway="--incident buffer"),
        one_stream(20),
        at("buffered@gateway"),
    ),
    StackCase(
        "st-gateway-504",
        ST,
        "cause",
        starlette_threaded(
            model="--incident slow_first --delay-s 0.8",
            gateway="--incident read_timeout --timeout-s 0.4",
        ),
        broken(4, 8),
        at("idle_cut@gateway"),
        marker=DEADLINE,
        user_test_passes=False,
    ),
    StackCase(
        "xnf-ingress-read-timeout",
        XNF,
        "cause",
        nginx_node_fastapi(model="--incident pause --pause-s 1.0", ingress="--read-timeout 0.5"),
        broken(4, 12),
        at("idle_cut@ingress"),
        marker=DEADLINE,
        user_test_passes=False,
        # nginx's own words: "upstream timed out ... while reading upstream".
        allowed=at("server_error@ingress"),
    ),
    StackCase(
        "xnf-gateway-read-timeout",
        XNF,
        "cause",
        nginx_node_fastapi(
            model="--incident pause --pause-s 0.9",
            gateway="--incident read_timeout --timeout-ms 400",
        ),
        broken(4, 12),
        at("idle_cut@gateway"),
        marker=DEADLINE,
        user_test_passes=False,
        # nginx's own words: "upstream prematurely closed connection".
        allowed=at("server_error@ingress"),
    ),
    StackCase(
        "xnf-ingress-buffer-gzip",
        XNF,
        "cause",
        nginx_node_fastapi(ingress="--buffer-gzip"),
        one_stream(20),
        at("buffered@ingress"),
    ),
    StackCase(
        "xnf-model-error",
        XNF,
        "cause",
        nginx_node_fastapi(model="--incident error"),
        broken(3, 12),
        at("server_error@model"),
        marker=DEADLINE,
        user_test_passes=False,
        # nginx's own words: "upstream prematurely closed connection".
        allowed=at("server_error@ingress"),
        said="DeviceError",
    ),
]

CONTROLS = [
    StackCase("nf-healthy", NF, "control", node_fastapi(), load(4, 16)),
    StackCase("st-healthy", ST, "control", starlette_threaded(), load(4, 16)),
    StackCase("xnf-healthy", XNF, "control", nginx_node_fastapi(), load(4, 16)),
    # A model silent 0.9 s mid-stream (a tool call) behind a gateway that waits: no cut.
    StackCase(
        "nf-model-pause",
        NF,
        "look-alike",
        node_fastapi(model="--incident pause --pause-s 0.9"),
        load(4, 12),
    ),
    StackCase(
        "nf-own-stall-at-model",
        NF,
        "look-alike",
        node_fastapi(),
        OWN_STALL,
        at("own_fault@model"),
    ),
]

CASES = [*CAUSES, *CONTROLS]


def marks(case: StackCase) -> list[pytest.MarkDecorator]:
    """A case the plugin misjudges in every run today is a strict xfail (it fails once that
    is fixed), one it misjudges in some runs a non-strict one; the reason says what is wrong."""
    if case.wrong:
        return [pytest.mark.xfail(strict=True, raises=Misjudged, reason=case.wrong)]
    if case.intermittent:
        return [pytest.mark.xfail(strict=False, raises=Misjudged, reason=case.intermittent)]
    return []


def as_params(cases: list[StackCase]) -> list[object]:
    """The cases as pytest parameters, each named by its case and marked by :func:`marks`."""
    return [pytest.param(case, id=case.name, marks=marks(case)) for case in cases]
