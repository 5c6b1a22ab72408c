"""Command-line options, ini keys and the frozen settings resolved from them.

Every option is a CLI flag registered with ``default=None`` plus an ini key of the same name
that carries the real default, sharing one help text. :func:`resolve_settings` reads them once
(CLI wins over ini, ini over the default) and validates each value, raising
:class:`pytest.UsageError` that names the value, where it came from and what is accepted.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pytest_streamguard.display import shown_command

ENABLE_HELP = (
    "Turn pytest-streamguard on: start the target behind Toxiproxy and check stream deadlines"
)
TARGET_URL_HELP = "Base URL of a target app that is already running (no process is started)"
TARGET_CMD_HELP = (
    "Command that starts the target app (no shell); '{port}' is replaced by a free port, "
    "otherwise the command must print its listening URL on stdout. "
    "Default: the bundled target_app with the tiny model"
)
TARGET_ARGS_HELP = (
    "Extra command-line flags for the target the plugin starts (the bundled target_app or "
    "--streamguard-target-cmd), split like a shell would, e.g. '--model gpt2 --heartbeat 0.5'"
)
READY_PATH_HELP = "Path polled on the target until it answers 2xx. Default: /readyz"
STARTUP_TIMEOUT_HELP = "Seconds to wait for a started process to be ready. Default: 120"
TOXIPROXY_HELP = (
    "URL of a running toxiproxy-server API (e.g. http://127.0.0.1:8474). "
    "Default: start the embedded one"
)
TTFT_HELP = "TTFT deadline in seconds for a bare @pytest.mark.token_deadline. Default: 0.5"
CHUNK_HELP = (
    "Per-chunk gap deadline in seconds for a bare @pytest.mark.token_deadline. Default: 0.2"
)
JSON_HELP = "Write a versioned JSON report with every trace's raw stamps and stats to this path"
HTML_HELP = (
    "Write a self-contained HTML report (summary table, per-test timeline plots) to this path"
)

DEFAULT_READY_PATH = "/readyz"
DEFAULT_STARTUP_TIMEOUT = 120.0
DEFAULT_TTFT = 0.5
DEFAULT_CHUNK = 0.2


# ini key (== CLI dest) -> (help, default as the ini string)
_VALUED_OPTIONS: dict[str, tuple[str, str]] = {
    "streamguard_target_url": (TARGET_URL_HELP, ""),
    "streamguard_target_cmd": (TARGET_CMD_HELP, ""),
    "streamguard_target_args": (TARGET_ARGS_HELP, ""),
    "streamguard_ready_path": (READY_PATH_HELP, DEFAULT_READY_PATH),
    "streamguard_startup_timeout": (STARTUP_TIMEOUT_HELP, str(DEFAULT_STARTUP_TIMEOUT)),
    "streamguard_toxiproxy": (TOXIPROXY_HELP, ""),
    "streamguard_ttft": (TTFT_HELP, str(DEFAULT_TTFT)),
    "streamguard_chunk": (CHUNK_HELP, str(DEFAULT_CHUNK)),
    "streamguard_json": (JSON_HELP, ""),
    "streamguard_html": (HTML_HELP, ""),
}


@dataclass(frozen=True)
class Settings:
    """The plugin's configuration for one session, resolved once in ``pytest_configure``."""

    enabled: bool
    target_url: str | None
    target_cmd: tuple[str, ...] | None
    ready_path: str
    startup_timeout: float
    toxiproxy_url: str | None
    ttft: float
    chunk: float
    json_path: Path | None
    target_args: tuple[str, ...] = ()
    html_path: Path | None = None

    @property
    def target_description(self) -> str:
        """A short human description of where the target comes from."""
        if self.target_url is not None:
            return f"url {self.target_url}"
        if self.target_cmd is not None:
            return f"command {shown_command(self.target_cmd)}"
        return "bundled target_app (tiny model)"

    @property
    def toxiproxy_description(self) -> str:
        """A short human description of which Toxiproxy server is used."""
        if self.toxiproxy_url is not None:
            return f"external {self.toxiproxy_url}"
        return "embedded"


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--streamguard*`` option and its ``streamguard_*`` ini key."""
    group = parser.getgroup("streamguard", "token-stream deadlines under network faults")
    group.addoption("--streamguard", action="store_true", default=None, help=ENABLE_HELP)
    parser.addini("streamguard", ENABLE_HELP, type="bool", default=False)
    for dest, (help_text, default) in _VALUED_OPTIONS.items():
        flag = "--" + dest.replace("_", "-")
        group.addoption(flag, dest=dest, default=None, help=help_text)
        parser.addini(dest, help_text, default=default)


def _raw(config: pytest.Config, dest: str) -> tuple[str, str]:
    """The raw string for one setting and where it came from (CLI over ini over default)."""
    value = config.getoption(dest)
    if value is not None:
        return str(value), f"--{dest.replace('_', '-')}"
    ini_value = str(config.getini(dest))
    if ini_value == _VALUED_OPTIONS[dest][1]:
        return ini_value, "default"
    return ini_value, f"ini key {dest}"


def _positive_seconds(config: pytest.Config, dest: str) -> float:
    raw, source = _raw(config, dest)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(
            f"{raw!r} from {source} is not a valid {dest}: expected a positive number of seconds"
        )
    return value


def _http_url(raw: str, source: str, dest: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise pytest.UsageError(
            f"{raw!r} from {source} is not a valid {dest}: expected an http(s) URL "
            "such as http://127.0.0.1:8000"
        )
    try:
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as exc:
        raise pytest.UsageError(
            f"{raw!r} from {source} is not a valid {dest}: {exc}; expected an http(s) URL "
            "such as http://127.0.0.1:8000"
        ) from None
    return raw.rstrip("/")


def _enabled(config: pytest.Config) -> bool:
    value = config.getoption("streamguard")
    if value is not None:
        return bool(value)
    return bool(config.getini("streamguard"))


def _split(raw: str, source: str, key: str, expected: str) -> tuple[str, ...]:
    """Split a command line like a shell would (no shell runs it); a UsageError otherwise."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise pytest.UsageError(
            f"{raw!r} from {source} is not a valid {key}: {exc}; expected {expected}"
        ) from None


def resolve_settings(config: pytest.Config) -> Settings:
    """Read and validate every option once; raise :class:`pytest.UsageError` on a bad value."""
    target_url_raw, url_source = _raw(config, "streamguard_target_url")
    target_cmd_raw, cmd_source = _raw(config, "streamguard_target_cmd")
    target_url = None
    if target_url_raw:
        target_url = _http_url(target_url_raw, url_source, "streamguard_target_url")
    target_cmd: tuple[str, ...] | None = None
    if target_cmd_raw.strip():
        target_cmd = _split(
            target_cmd_raw,
            cmd_source,
            "streamguard_target_cmd",
            "a command line such as 'python app.py --port {port}'",
        )
    if target_url is not None and target_cmd is not None:
        raise pytest.UsageError(
            f"streamguard_target_url ({url_source}) and streamguard_target_cmd ({cmd_source}) "
            "are both set: give one of them (or neither, for the bundled target)"
        )

    target_args_raw, args_source = _raw(config, "streamguard_target_args")
    target_args = _split(
        target_args_raw,
        args_source,
        "streamguard_target_args",
        "flags such as '--heartbeat 0.5 --allow-fault-knobs'",
    )
    if target_args and target_url is not None:
        raise pytest.UsageError(
            f"streamguard_target_args ({args_source}) and streamguard_target_url ({url_source}) "
            "are both set: extra flags apply only to a target the plugin starts"
        )

    ready_path, ready_source = _raw(config, "streamguard_ready_path")
    if not ready_path.startswith("/"):
        raise pytest.UsageError(
            f"{ready_path!r} from {ready_source} is not a valid streamguard_ready_path: "
            "expected a path starting with '/', such as /readyz"
        )

    toxiproxy_raw, toxiproxy_source = _raw(config, "streamguard_toxiproxy")
    toxiproxy_url = None
    if toxiproxy_raw:
        toxiproxy_url = _http_url(toxiproxy_raw, toxiproxy_source, "streamguard_toxiproxy")
        if urlsplit(toxiproxy_url).scheme != "http":
            raise pytest.UsageError(
                f"{toxiproxy_raw!r} from {toxiproxy_source} is not a valid streamguard_toxiproxy: "
                "toxiproxy's API is plain http, such as http://127.0.0.1:8474"
            )

    json_raw, _ = _raw(config, "streamguard_json")
    html_raw, html_source = _raw(config, "streamguard_html")
    if html_raw and Path(html_raw).is_dir():
        raise pytest.UsageError(
            f"{html_raw!r} from {html_source} is not a valid streamguard_html: it is a "
            "directory; expected a file path such as reports/streamguard.html"
        )
    return Settings(
        enabled=_enabled(config),
        target_url=target_url,
        target_cmd=target_cmd,
        ready_path=ready_path,
        startup_timeout=_positive_seconds(config, "streamguard_startup_timeout"),
        toxiproxy_url=toxiproxy_url,
        ttft=_positive_seconds(config, "streamguard_ttft"),
        chunk=_positive_seconds(config, "streamguard_chunk"),
        json_path=Path(json_raw) if json_raw else None,
        html_path=Path(html_raw) if html_raw else None,
        target_args=target_args,
    )
