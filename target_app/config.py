"""The target's settings: one frozen object built from the command line or by a test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TINY_MODEL = "streamguard/tiny"
"""The ``--model`` value that selects the offline tiny model built in code."""

Engine = Literal["batch", "generate"]
DeviceChoice = Literal["auto", "cpu", "cuda"]
DtypeChoice = Literal["auto", "float32", "float16", "bfloat16"]


@dataclass(frozen=True)
class TargetConfig:
    """Everything the app factory needs; the CLI flags map one to one onto these fields."""

    model: str = TINY_MODEL
    device: DeviceChoice = "auto"
    dtype: DtypeChoice = "auto"
    engine: Engine = "batch"
    #: ``--cpu-threads``: torch's threads for one op on the CPU; None: 1 for the tiny model (its
    #: ops are too small to split), torch's own choice (one per core) for any other; 0: torch's.
    cpu_threads: int | None = None
    naive: bool = False
    #: ``--text-streamer-timeout``: serve as the incident's app did (engines/incident.py);
    #: None: off, 0: no timeout (the fix).
    text_streamer_timeout: float | None = None
    max_concurrency: int = 64
    heartbeat: float = 15.0
    max_new_tokens_limit: int = 2000
    allow_fault_knobs: bool = False
    send_timeout: float = 10.0
    max_unsent_bytes: int = 1 << 20
    max_backlog: int = 256
    stream_timeout: float = 30.0
    max_body_bytes: int = 1 << 20
    send_buffer: int = 0
    seed: int = 0
    shutdown_grace: float = 3.0
    max_header_bytes: int = 16384
    header_timeout: float = 30.0
    body_timeout: float = 30.0

    def problems(self) -> list[str]:
        """Return one message per invalid field, naming the flag and what it accepts."""
        found: list[str] = []
        if self.max_concurrency < 1:
            found.append(f"--max-concurrency must be >= 1, got {self.max_concurrency}")
        if self.heartbeat < 0:
            found.append(f"--heartbeat must be >= 0 seconds (0 turns it off), got {self.heartbeat}")
        if self.max_new_tokens_limit < 1:
            found.append(f"--max-new-tokens-limit must be >= 1, got {self.max_new_tokens_limit}")
        if self.send_timeout <= 0:
            found.append(f"--send-timeout must be > 0 seconds, got {self.send_timeout}")
        if self.max_unsent_bytes < 1:
            found.append(f"--max-unsent-bytes must be >= 1 byte, got {self.max_unsent_bytes}")
        if self.max_backlog < 1:
            found.append(f"--max-backlog must be >= 1 token, got {self.max_backlog}")
        if self.text_streamer_timeout is not None and self.text_streamer_timeout < 0:
            found.append(
                "--text-streamer-timeout must be >= 0 seconds (0 = no timeout), got "
                f"{self.text_streamer_timeout}"
            )
        if self.stream_timeout <= 0:
            found.append(f"--stream-timeout must be > 0 seconds, got {self.stream_timeout}")
        if self.send_buffer < 0:
            found.append(
                f"--send-buffer must be >= 0 bytes (0 = kernel default), got {self.send_buffer}"
            )
        if self.max_body_bytes < 1:
            found.append(f"--max-body-bytes must be >= 1, got {self.max_body_bytes}")
        if self.shutdown_grace < 0:
            found.append(f"--shutdown-grace must be >= 0 seconds, got {self.shutdown_grace}")
        if self.max_header_bytes < 1024:
            found.append(f"--max-header-bytes must be >= 1024, got {self.max_header_bytes}")
        if self.header_timeout <= 0:
            found.append(f"--header-timeout must be > 0 seconds, got {self.header_timeout}")
        if self.body_timeout <= 0:
            found.append(f"--body-timeout must be > 0 seconds, got {self.body_timeout}")
        if self.cpu_threads is not None and self.cpu_threads < 0:
            found.append(f"--cpu-threads must be >= 0 (0: torch's own), got {self.cpu_threads}")
        return found
