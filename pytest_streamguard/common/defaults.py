"""The plugin's defaults, shared by the options (:mod:`pytest_streamguard.plugin.settings`) and
the code that applies them when no option is given (the client, the guard, the target).

Standard library only: any family may import this.
"""

from __future__ import annotations

DEFAULT_READY_PATH = "/readyz"
DEFAULT_COMPARE_MIN_SAMPLES = 5
DEFAULT_STARTUP_TIMEOUT = 120.0
DEFAULT_TTFT = 0.5
DEFAULT_CHUNK = 0.2
DEFAULT_MAX_STREAM_SECONDS = 300.0
DEFAULT_PROXY_HOST = "127.0.0.1"
#: ``--streamguard-probe``: empty for the target's ready path (``off``, ``tcp`` or a path).
DEFAULT_PROBE = ""
DEFAULT_PROBE_INTERVAL = 0.05
#: ``--streamguard-client``: the official client of each stream's format, where installed.
DEFAULT_CLIENT = "auto"
