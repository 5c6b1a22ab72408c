"""Telling a slow reader by what its client takes, not by whether one write returned.

uvicorn's ``send`` returns as soon as the bytes are in its transport buffer and blocks only
while that buffer is over 64 KiB, and the kernel grows a connection's send buffer to megabytes
on its own; so a client that reads slower than the stream is written can fall minutes behind
without a single write taking long (the incident: a send queue of 488 KB after 30 s, and a 10 s
per-write timeout that never fired). A ``DrainWatch`` instead asks the connection how many
bytes the client has taken so far and how many the server still holds for it
(``protocol.GuardedHttpToolsProtocol``'s ``progress``), remembers when each write was offered,
and from that knows how long the oldest byte not yet taken has waited.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

Progress = Callable[[], tuple[int, int]]
"""(bytes the client has taken so far, bytes the server still holds for it) on a connection."""


class DrainWatch:
    """The age of the oldest byte a stream has offered and its client has not taken, and the
    bytes held for that client; ``problem`` names the bound one of them passed."""

    def __init__(self, progress: Progress, max_wait_s: float, max_unsent_bytes: int) -> None:
        self._progress = progress
        self._max_wait_s = max_wait_s
        self._max_unsent = max_unsent_bytes
        self._written: deque[tuple[int, float]] = deque()
        """(connection offset just past a write, when it was offered), oldest first, for the
        writes the client has not taken to their end yet."""
        self._offering_since: float | None = None

    def offer(self, now: float) -> None:
        """A write is about to be handed to ``send``; its bytes wait from ``now``."""
        self._offering_since = now

    def written(self) -> None:
        """``send`` returned: the offered bytes are in the server's buffers."""
        assert self._offering_since is not None
        taken, held = self._progress()
        self._written.append((taken + held, self._offering_since))
        self._offering_since = None

    def oldest_wait(self, now: float) -> float:
        """Seconds the oldest byte not yet taken by the client has waited (0 if none)."""
        taken, _ = self._progress()
        while self._written and self._written[0][0] <= taken:
            self._written.popleft()
        since = self._written[0][1] if self._written else self._offering_since
        return 0.0 if since is None else now - since

    def time_left(self, now: float) -> float:
        """Seconds until the oldest byte not yet taken passes the wait bound."""
        return self._max_wait_s - self.oldest_wait(now)

    def problem(self, now: float) -> str | None:
        """Why this client is a slow reader, or None while it keeps within both bounds."""
        waited = self.oldest_wait(now)
        if waited >= self._max_wait_s:
            return (
                f"slow reader: bytes written {waited:.1f} s ago were still not taken by the "
                f"client (--send-timeout {self._max_wait_s:g})"
            )
        _, held = self._progress()
        if held > self._max_unsent:
            return (
                f"slow reader: {held} bytes written were not taken by the client "
                f"(--max-unsent-bytes {self._max_unsent})"
            )
        return None
