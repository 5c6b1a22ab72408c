"""Server-side fault knobs, per request, for reproducing incidents on purpose."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultKnobs:
    """What the request's ``"fault"`` object asked for (all off by default).

    ``cold_start_s``: delay before the first token. ``stall_after``/``stall_s``: after the token
    with index ``stall_after`` has been sent, pause ``stall_s`` seconds. ``raise_after``:
    generation raises after that many tokens. ``accel_header`` false: omit
    ``X-Accel-Buffering: no`` so a buffering ingress buffers the stream. ``pad_bytes``: each
    token event also carries a ``pad:`` line of that many bytes, a field SSE clients ignore,
    so the stream is as heavy as one with large chunks (logprobs, tool-call deltas) and a slow
    reader fills the buffers between it and the server within a bounded answer.
    ``keep_generating``: the client's disconnect does not stop generation; the engine goes on
    for nobody until the answer's end (the connection-cut incident's unfixed server).
    """

    cold_start_s: float = 0.0
    stall_after: int | None = None
    stall_s: float = 0.0
    raise_after: int | None = None
    accel_header: bool = True
    pad_bytes: int = 0
    keep_generating: bool = False


NO_FAULTS = FaultKnobs()


class InjectedFault(RuntimeError):
    """The exception a ``raise_after`` knob raises inside generation."""

    def __init__(self, after: int) -> None:
        super().__init__(f"injected fault: generation raised after {after} tokens (raise_after)")
