"""Command-line options, ini keys and the frozen settings resolved from them.

Every setting is an ini key carrying the real default; all but those rarely typed on a command
line (:data:`INI_ONLY`) are also a CLI flag registered with ``default=None``, sharing the key's
one-line help text. :func:`resolve_settings` reads them once
(CLI wins over ini, ini over the default) and validates each value, raising
:class:`pytest.UsageError` that names the value, where it came from and what is accepted.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import pytest

from pytest_streamguard.common.defaults import (
    DEFAULT_CHUNK,
    DEFAULT_CLIENT,
    DEFAULT_COMPARE_MIN_SAMPLES,
    DEFAULT_MAX_STREAM_SECONDS,
    DEFAULT_PROBE,
    DEFAULT_PROBE_INTERVAL,
    DEFAULT_PROXY_HOST,
    DEFAULT_READY_PATH,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TTFT,
)
from pytest_streamguard.common.display import shown_command
from pytest_streamguard.common.names import parse_fail_on
from pytest_streamguard.report.bounds import Bound, parse_bounds
from pytest_streamguard.services.stack_spec import ServiceSpec, parse_ready_paths, parse_services

# One help text per setting, shared by the option and the ini key, one line each: what the
# setting is for. What each accepts, and its default, is in docs/getting-started.md's table.
ENABLE_HELP = "Turn pytest-streamguard on (the target behind Toxiproxy)"
TARGET_URL_HELP = "Base URL of an app already running (none is started)"
TARGET_CMD_HELP = "Command that starts your app ('{port}': a free port)"
TARGET_ARGS_HELP = "Extra flags for the target the plugin starts"
TARGET_CWD_HELP = "Working directory of the target's and services' commands"
SERVICES_HELP = "A stack's service, NAME=COMMAND, repeatable"
SERVICE_READY_HELP = "A service's own ready path, one 'NAME = PATH' per line"
LOG_FILES_HELP = "Log files of a URL target to follow, one 'NAME = PATH' per line"
SEED_HELP = "Seed of every random draw, so that a run can be repeated"
CLIENT_HELP = "Who judges each stream: auto, a client's name, or none"
TRANSCRIPTS_HELP = "Directory to save streams the reader and client disagree on"
READY_PATH_HELP = "Path polled until the app answers 2xx (default /readyz)"
STARTUP_TIMEOUT_HELP = "Seconds a started process may take to be ready (120)"
PROBE_HELP = "Probe sent beside the streams: a PATH, tcp, or off"
PROBE_INTERVAL_HELP = "Seconds between two probes (0.05)"
TOXIPROXY_HELP = "URL of a running toxiproxy-server (else the embedded)"
PROXY_HOST_HELP = "Address the proxies listen on and clients dial"
PROXY_PORTS_HELP = "Ports the proxies listen on, LOW-HIGH"
UPSTREAM_HOST_HELP = "Address Toxiproxy reaches the target at"
RAY_HELP = "Shard loads over Ray: auto, local, or an address"
TTFT_HELP = "TTFT deadline in seconds of a bare token_deadline (0.5)"
CHUNK_HELP = "Gap deadline in seconds of a bare token_deadline (0.2)"
MAX_STREAM_HELP = "Seconds a stream may stay open without a total deadline"
JSON_HELP = "Write the JSON report (raw stamps) to this path"
HTML_HELP = "Write the self-contained HTML report to this path"
PROFILES_HELP = "Directory of your own fault profiles (*.json)"
SAVE_HELP = "Save this run's figures as a baseline to this path"
COMPARE_HELP = "Compare each test's figures with this baseline"
COMPARE_FAIL_HELP = "Bounds that fail a compare, e.g. ttft_p95:20%"
COMPARE_MIN_SAMPLES_HELP = "Fewest samples a compared figure needs to fail a run (5)"
FAIL_ON_HELP = "Findings (comma-separated) that fail a test"
UNCHECKED_HELP = "Unverifiable fail_on findings: warn or fail"
STRICT_FAULTS_HELP = "Fail a test whose faults never fired"
JSON_TEXT_HELP = "Keep every chunk's text in the JSON report, not only failures'"
REQUIRE_HELP = "Make tests that need it an error while it is off"

#: Settings a user rarely types on a command line: ini keys only (``-o KEY=VALUE`` sets one
#: for a single run), so that ``--help`` lists what a run is steered by.
INI_ONLY: Final = frozenset(
    {
        "streamguard_target_cwd",
        "streamguard_service_ready",
        "streamguard_transcripts",
        "streamguard_startup_timeout",
        "streamguard_probe_interval",
        "streamguard_profiles",
        "streamguard_compare_min_samples",
        "streamguard_json_text",
    }
)


# The flags beside --streamguard: ini key (== CLI dest) -> help; each defaults to off.
_FLAG_OPTIONS: dict[str, str] = {
    "streamguard_strict_faults": STRICT_FAULTS_HELP,
    "streamguard_require": REQUIRE_HELP,
    "streamguard_json_text": JSON_TEXT_HELP,
}
# Repeatable options (each use adds a line; the ini key has one per line): ini key -> help.
_LIST_OPTIONS: dict[str, tuple[str, str]] = {
    "streamguard_services": ("--streamguard-service", SERVICES_HELP),
    "streamguard_service_ready": ("--streamguard-service-ready", SERVICE_READY_HELP),
}
# ini key (== CLI dest) -> (help, default as the ini string)
_VALUED_OPTIONS: dict[str, tuple[str, str]] = {
    "streamguard_target_url": (TARGET_URL_HELP, ""),
    "streamguard_target_cmd": (TARGET_CMD_HELP, ""),
    "streamguard_target_args": (TARGET_ARGS_HELP, ""),
    "streamguard_target_cwd": (TARGET_CWD_HELP, ""),
    "streamguard_seed": (SEED_HELP, ""),
    "streamguard_client": (CLIENT_HELP, DEFAULT_CLIENT),
    "streamguard_transcripts": (TRANSCRIPTS_HELP, ""),
    "streamguard_ready_path": (READY_PATH_HELP, DEFAULT_READY_PATH),
    "streamguard_startup_timeout": (STARTUP_TIMEOUT_HELP, str(DEFAULT_STARTUP_TIMEOUT)),
    "streamguard_probe": (PROBE_HELP, DEFAULT_PROBE),
    "streamguard_probe_interval": (PROBE_INTERVAL_HELP, str(DEFAULT_PROBE_INTERVAL)),
    "streamguard_toxiproxy": (TOXIPROXY_HELP, ""),
    "streamguard_proxy_host": (PROXY_HOST_HELP, DEFAULT_PROXY_HOST),
    "streamguard_proxy_ports": (PROXY_PORTS_HELP, ""),
    "streamguard_upstream_host": (UPSTREAM_HOST_HELP, ""),
    "streamguard_ray": (RAY_HELP, ""),
    "streamguard_ttft": (TTFT_HELP, str(DEFAULT_TTFT)),
    "streamguard_chunk": (CHUNK_HELP, str(DEFAULT_CHUNK)),
    "streamguard_max_stream_seconds": (MAX_STREAM_HELP, str(DEFAULT_MAX_STREAM_SECONDS)),
    "streamguard_json": (JSON_HELP, ""),
    "streamguard_html": (HTML_HELP, ""),
    "streamguard_profiles": (PROFILES_HELP, ""),
    "streamguard_save": (SAVE_HELP, ""),
    "streamguard_compare": (COMPARE_HELP, ""),
    "streamguard_compare_fail": (COMPARE_FAIL_HELP, ""),
    "streamguard_fail_on": (FAIL_ON_HELP, ""),
    "streamguard_unchecked": (UNCHECKED_HELP, "warn"),
    "streamguard_compare_min_samples": (COMPARE_MIN_SAMPLES_HELP, str(DEFAULT_COMPARE_MIN_SAMPLES)),
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
    max_stream_seconds: float = DEFAULT_MAX_STREAM_SECONDS
    save_path: Path | None = None
    compare_path: Path | None = None
    compare_fail: tuple[Bound, ...] = ()
    compare_min_samples: int = DEFAULT_COMPARE_MIN_SAMPLES
    strict_faults: bool = False
    proxy_host: str = DEFAULT_PROXY_HOST
    proxy_ports: range | None = None
    upstream_host: str | None = None
    ray_address: str | None = None
    require: bool = False
    target_cwd: Path | None = None
    seed: int = 0
    fail_on: tuple[str, ...] = ()
    #: ``warn`` or ``fail``: what a ``fail_on`` gate that could not be checked does.
    unchecked: str = "warn"
    json_text: bool = False
    #: ``off``, ``tcp``, a path, or empty for the target's ready path.
    probe: str = DEFAULT_PROBE
    probe_interval: float = DEFAULT_PROBE_INTERVAL
    client: str = DEFAULT_CLIENT
    transcripts: Path | None = None
    #: A stack's services in start order (``--streamguard-service``); empty: one target.
    services: tuple[ServiceSpec, ...] = ()
    #: ``(NAME, PATH)`` of the log files a target given by URL writes (ini only).
    log_files: tuple[tuple[str, str], ...] = ()

    @property
    def target_description(self) -> str:
        """A short human description of where the target comes from."""
        if self.services:
            names = " -> ".join(spec.name for spec in reversed(self.services))
            return f"stack {names} (entry {self.services[-1].name})"
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


SETTINGS_KEY = pytest.StashKey[Settings]()
"""Where ``pytest_configure`` keeps the resolved settings."""


@dataclass(frozen=True)
class _Given:
    """One setting as given: its ini key, its raw string and where that came from (the
    option, the ini file or the default)."""

    key: str
    raw: str
    source: str

    def invalid(self, why: str) -> pytest.UsageError:
        """The usage error for a bad value: the value, where it came from, the ini key, and
        ``why`` (what is wrong and what is accepted)."""
        return pytest.UsageError(
            f"{self.raw!r} from {self.source} is not a valid {self.key}: {why}"
        )


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--streamguard*`` option and its ``streamguard_*`` ini key."""
    group = parser.getgroup("streamguard", "token-stream deadlines under network faults")
    group.addoption("--streamguard", action="store_true", default=None, help=ENABLE_HELP)
    parser.addini("streamguard", ENABLE_HELP, type="bool", default=False)
    for dest, help_text in _FLAG_OPTIONS.items():
        if dest not in INI_ONLY:
            flag = "--" + dest.replace("_", "-")
            group.addoption(flag, dest=dest, action="store_true", default=None, help=help_text)
        parser.addini(dest, help_text, type="bool", default=False)
    for dest, (help_text, default) in _VALUED_OPTIONS.items():
        if dest not in INI_ONLY:
            flag = "--" + dest.replace("_", "-")
            # argparse %-formats option help (a '%' in an example must be doubled), ini not.
            group.addoption(flag, dest=dest, default=None, help=help_text.replace("%", "%%"))
        parser.addini(dest, help_text, default=default)
    for dest, (flag, help_text) in _LIST_OPTIONS.items():
        if dest not in INI_ONLY:
            group.addoption(flag, dest=dest, action="append", default=None, help=help_text)
        parser.addini(dest, help_text, type="linelist", default=[])
    parser.addini("streamguard_log_files", LOG_FILES_HELP, type="linelist", default=[])
    _take_lone_flag_values(parser, FLAG_VALUED_OPTIONS)


# Options whose value is itself a flag of another program. argparse reads a lone value that
# starts with '-' ('--accel-off') as an option of pytest's and stops with "expected one
# argument", so such a value is joined to its option ('--streamguard-target-args=--accel-off')
# before argparse sees the command line. A value that is one of pytest's own options is left
# alone, so a forgotten value still gets argparse's error.
FLAG_VALUED_OPTIONS: Final = ("--streamguard-target-args",)


def _take_lone_flag_values(parser: pytest.Parser, options: tuple[str, ...]) -> None:
    """Make pytest's argument parser take a lone ``-x``/``--x`` value of ``options``."""
    optparser = getattr(parser, "optparser", None)
    parse_known_args = getattr(optparser, "parse_known_args", None)
    if parse_known_args is None or getattr(parse_known_args, "_streamguard", False):
        return
    known = getattr(optparser, "_option_string_actions", {})

    def joined(args: list[str] | None = None, namespace: Any = None) -> Any:
        if args is not None:
            args = join_flag_values(list(args), options, known)
        return parse_known_args(args, namespace)

    joined._streamguard = True  # type: ignore[attr-defined]
    optparser.parse_known_args = joined  # type: ignore[union-attr]


def join_flag_values(args: list[str], options: tuple[str, ...], known: Any = ()) -> list[str]:
    """``[opt, '--flag']`` becomes ``['opt=--flag']`` for each of ``options`` (see above)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        nxt = args[i + 1] if i + 1 < len(args) else None
        if (
            arg in options
            and isinstance(nxt, str)
            and nxt.startswith("-")
            and nxt.partition("=")[0] not in known
        ):
            out.append(f"{arg}={nxt}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _raw(config: pytest.Config, dest: str) -> _Given:
    """One setting's raw string and where it came from (CLI over ini over default)."""
    value = config.getoption(dest, None)
    if value is not None:
        return _Given(dest, str(value), f"--{dest.replace('_', '-')}")
    ini_value = str(config.getini(dest))
    if ini_value == _VALUED_OPTIONS[dest][1]:
        return _Given(dest, ini_value, "default")
    return _Given(dest, ini_value, f"ini key {dest}")


#: Seeds are 32-bit, as Go's toxiproxy-server -seed and numpy take them.
SEED_LIMIT = 2**32
#: Where a pytest-xdist controller hands its seed to its workers (``workerinput``).
SEED_WORKERINPUT = "streamguard_seed"


def _seed(config: pytest.Config) -> int:
    """The run's seed: the option, else the controller's (an xdist worker), else a new one."""
    given = _raw(config, "streamguard_seed")
    if not given.raw:
        handed = getattr(config, "workerinput", {}).get(SEED_WORKERINPUT)
        if handed is not None:
            return int(handed)
        return int.from_bytes(os.urandom(4), "big")
    try:
        seed = int(given.raw)
    except ValueError:
        seed = -1
    if not 0 <= seed < SEED_LIMIT:
        raise given.invalid(f"expected a whole number from 0 to {SEED_LIMIT - 1}")
    return seed


def _target_cwd(config: pytest.Config, has_cmd: bool) -> Path | None:
    """The target command's working directory, relative to the ini file's directory (as the
    profile folder); it must exist."""
    given = _raw(config, "streamguard_target_cwd")
    if not given.raw:
        return None
    if not has_cmd:
        raise pytest.UsageError(
            f"streamguard_target_cwd ({given.source}) needs streamguard_target_cmd: it is the "
            "working directory of the command that starts your app"
        )
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    path = (base / given.raw).resolve()
    if not path.is_dir():
        raise given.invalid(f"{path} is not a directory")
    return path


def _positive_seconds(config: pytest.Config, dest: str) -> float:
    given = _raw(config, dest)
    try:
        value = float(given.raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise given.invalid("expected a positive number of seconds")
    return value


def _http_url(given: _Given) -> str:
    parts = urlsplit(given.raw)
    example = "expected an http(s) URL such as http://127.0.0.1:8000"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise given.invalid(example)
    try:
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as exc:
        raise given.invalid(f"{exc}; {example}") from None
    return given.raw.rstrip("/")


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _host(config: pytest.Config, dest: str) -> str | None:
    """A host name or IP address, without a port (None when empty)."""
    given = _raw(config, dest)
    host = given.raw.strip()
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        labels = host.removesuffix(".").split(".")
        if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
            raise given.invalid(
                "expected a host name or an IP address without a port or scheme, such as "
                "127.0.0.1, ::1 or toxiproxy.ci.internal"
            ) from None
    return host


def _port_range(config: pytest.Config, dest: str) -> range | None:
    """``LOW-HIGH`` (or one port) as the range of ports it names (None when empty)."""
    given = _raw(config, dest)
    text = given.raw.strip()
    if not text:
        return None
    low, dash, high = text.partition("-")
    if not dash:
        high = low
    if not (low.strip().isdigit() and high.strip().isdigit()) or not (
        1 <= int(low) <= int(high) <= 65535
    ):
        raise given.invalid(
            "expected a port range LOW-HIGH with 1 <= LOW <= HIGH <= 65535, such as "
            "20000-20019, or one port"
        )
    return range(int(low), int(high) + 1)


def _client(config: pytest.Config, enabled: bool) -> str:
    """``--streamguard-client``: auto, none, or an installed judge's name. Checked only while
    the plugin is on: nothing is judged while it is off, and the judges' registry (and what it
    imports) must not load on every ``pytest`` start."""
    given = _raw(config, "streamguard_client")
    if not enabled:
        return given.raw.strip()
    # Imported here, not at the top: see the docstring (the plugin's off path stays light).
    from pytest_streamguard.judge.registry import check_client

    try:
        return check_client(given.raw.strip(), given.source)
    except ValueError as exc:
        raise given.invalid(str(exc).split(": ", 1)[1]) from None


def _transcripts(config: pytest.Config) -> Path | None:
    """Where disagreements' transcripts go: a directory, made when needed (None when empty)."""
    given = _raw(config, "streamguard_transcripts")
    if given.raw and Path(given.raw).exists() and not Path(given.raw).is_dir():
        raise given.invalid("it is a file; expected a directory path")
    return Path(given.raw) if given.raw else None


def _flag(config: pytest.Config, dest: str) -> bool:
    """A boolean setting: the CLI flag when given, else the ini key (default in the ini)."""
    value = config.getoption(dest, None)
    if value is not None:
        return bool(value)
    try:
        return bool(config.getini(dest))
    except (ValueError, pytest.UsageError) as exc:  # pytest's words for a value not a truth
        raise pytest.UsageError(
            f"ini key {dest}: {exc}; expected true or false (or yes/no, on/off, 1/0)"
        ) from None


def _split(given: _Given, expected: str) -> tuple[str, ...]:
    """Split a command line like a shell would (no shell runs it); a UsageError otherwise."""
    try:
        return tuple(shlex.split(given.raw))
    except ValueError as exc:
        raise given.invalid(f"{exc}; expected {expected}") from None


def resolve_settings(config: pytest.Config) -> Settings:
    """Read and validate every option once; raise :class:`pytest.UsageError` on a bad value.

    The options are checked in a fixed order (the target, its readiness, the probe, Toxiproxy,
    the reports and the comparison, the proxies, Ray, the findings, then the rest), so a
    command line with several bad values always names the same one first."""
    target_url, target_cmd = _target(config)
    target_args = _target_args(config, target_url)
    services = _services(config, target_url, target_cmd, target_args)
    return Settings(
        target_url=target_url,
        target_cmd=target_cmd,
        target_args=target_args,
        services=services,
        ready_path=_ready_path(config),
        probe=_probe(config),
        toxiproxy_url=_toxiproxy_url(config),
        json_path=_optional_path(config, "streamguard_json"),
        html_path=_optional_path(config, "streamguard_html", Path.is_dir, _HTML_IS_DIR),
        save_path=_optional_path(config, "streamguard_save"),
        compare_path=(
            compare_path := _optional_path(
                config, "streamguard_compare", lambda path: not path.is_file(), _NO_BASELINE
            )
        ),
        compare_fail=_compare_fail(config, compare_path),
        compare_min_samples=_compare_min_samples(config),
        proxy_host=_proxy_host(config),
        ray_address=_ray_address(config),
        fail_on=_fail_on(config),
        probe_interval=_positive_seconds(config, "streamguard_probe_interval"),
        unchecked=_unchecked(config),
        proxy_ports=_port_range(config, "streamguard_proxy_ports"),
        upstream_host=_host(config, "streamguard_upstream_host"),
        enabled=(enabled := _flag(config, "streamguard")),
        strict_faults=_flag(config, "streamguard_strict_faults"),
        require=_flag(config, "streamguard_require"),
        json_text=_flag(config, "streamguard_json_text"),
        target_cwd=_target_cwd(config, target_cmd is not None or bool(services)),
        log_files=_log_files(config, target_url),
        seed=_seed(config),
        client=_client(config, enabled),
        transcripts=_transcripts(config),
        startup_timeout=_positive_seconds(config, "streamguard_startup_timeout"),
        ttft=_positive_seconds(config, "streamguard_ttft"),
        chunk=_positive_seconds(config, "streamguard_chunk"),
        max_stream_seconds=_positive_seconds(config, "streamguard_max_stream_seconds"),
    )


def _target(config: pytest.Config) -> tuple[str | None, tuple[str, ...] | None]:
    """The running target's URL or the command that starts one (at most one of them)."""
    url = _raw(config, "streamguard_target_url")
    cmd = _raw(config, "streamguard_target_cmd")
    target_url = _http_url(url) if url.raw else None
    target_cmd: tuple[str, ...] | None = None
    if cmd.raw.strip():
        target_cmd = _split(cmd, "a command line such as 'python app.py --port {port}'")
    if target_url is not None and target_cmd is not None:
        raise pytest.UsageError(
            f"streamguard_target_url ({url.source}) and streamguard_target_cmd ({cmd.source}) "
            "are both set: give one of them (or neither, for the bundled target)"
        )
    return target_url, target_cmd


def _lines(config: pytest.Config, dest: str) -> tuple[list[str], str]:
    """A repeatable setting's lines and where they came from (every use of the CLI option
    replaces the ini key's lines)."""
    given = config.getoption(dest, None)
    if given:
        return [str(line) for line in given], _LIST_OPTIONS[dest][0]
    return [str(line) for line in config.getini(dest)], f"ini key {dest}"


def _services(
    config: pytest.Config,
    target_url: str | None,
    target_cmd: tuple[str, ...] | None,
    target_args: tuple[str, ...],
) -> tuple[ServiceSpec, ...]:
    """A stack's services, with their ready paths; none beside a single target's options."""
    raw, source = _lines(config, "streamguard_services")
    ready_raw, ready_source = _lines(config, "streamguard_service_ready")
    try:
        services = parse_services(raw, source)
        services = parse_ready_paths(ready_raw, ready_source, services)
    except ValueError as exc:
        raise pytest.UsageError(f"{exc}") from None
    single = [
        f"streamguard_{key} ({_raw(config, 'streamguard_' + key).source})"
        for key, value in (
            ("target_url", target_url),
            ("target_cmd", target_cmd),
            ("target_args", target_args or None),
        )
        if value is not None
    ]
    if services and single:
        raise pytest.UsageError(
            f"streamguard_services ({source}) and {', '.join(single)} are both set: a stack's "
            "services replace the single target (its last service is the entry clients reach); "
            "give the services, or one target"
        )
    return services


_LOG_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _log_files(config: pytest.Config, target_url: str | None) -> tuple[tuple[str, str], ...]:
    """``streamguard_log_files``: ``NAME = PATH`` lines, for a target given by URL only."""
    found: dict[str, str] = {}
    for line in config.getini("streamguard_log_files"):
        name, sign, path = str(line).partition("=")
        name, path = name.strip(), path.strip()
        if not sign or not _LOG_NAME.fullmatch(name) or not path or name in found:
            why = "a name given twice" if name in found else "not NAME = PATH"
            given = _Given("streamguard_log_files line", str(line), "ini key streamguard_log_files")
            raise given.invalid(
                f"{why}; expected one 'NAME = PATH' per line, NAME of letters, digits, "
                "'_', '.' or '-' (such as 'app = logs/app.log')"
            )
        found[name] = path
    if found and target_url is None:
        raise pytest.UsageError(
            "ini key streamguard_log_files is set but the target is not given by URL "
            "(streamguard_target_url): the output of a process the plugin starts is kept "
            "already; follow log files only for a target that runs on its own"
        )
    return tuple(found.items())


def _target_args(config: pytest.Config, target_url: str | None) -> tuple[str, ...]:
    """Extra flags for a target the plugin starts (none for a running one at ``target_url``)."""
    given = _raw(config, "streamguard_target_args")
    target_args = _split(given, "flags such as '--heartbeat 0.5 --allow-fault-knobs'")
    if target_args and target_url is not None:
        url_source = _raw(config, "streamguard_target_url").source
        raise pytest.UsageError(
            f"streamguard_target_args ({given.source}) and streamguard_target_url ({url_source}) "
            "are both set: extra flags apply only to a target the plugin starts"
        )
    return target_args


def _ready_path(config: pytest.Config) -> str:
    """The path polled until the target is ready."""
    given = _raw(config, "streamguard_ready_path")
    if not given.raw.startswith("/"):
        raise given.invalid("expected a path starting with '/', such as /readyz")
    return given.raw


def _probe(config: pytest.Config) -> str:
    """What the probe sent beside the streams asks: ``off``, ``tcp``, a path, or empty for the
    target's ready path."""
    given = _raw(config, "streamguard_probe")
    probe = given.raw.strip()
    if probe not in ("", "off", "tcp") and not probe.startswith("/"):
        raise replace(given, raw=probe).invalid(
            "expected 'off', 'tcp' or a path starting with '/', such as /readyz"
        )
    return probe


def _toxiproxy_url(config: pytest.Config) -> str | None:
    """A running toxiproxy-server's API (plain http), None for the embedded one."""
    given = _raw(config, "streamguard_toxiproxy")
    if not given.raw:
        return None
    toxiproxy_url = _http_url(given)
    if urlsplit(toxiproxy_url).scheme != "http":
        raise given.invalid("toxiproxy's API is plain http, such as http://127.0.0.1:8474")
    return toxiproxy_url


def _optional_path(
    config: pytest.Config, dest: str, bad: Callable[[Path], bool] | None = None, why: str = ""
) -> Path | None:
    """A file path setting as given (None when empty), refused with ``why`` where ``bad``."""
    given = _raw(config, dest)
    if given.raw and bad is not None and bad(Path(given.raw)):
        raise given.invalid(why)
    return Path(given.raw) if given.raw else None


_HTML_IS_DIR = "it is a directory; expected a file path such as reports/streamguard.html"
_NO_BASELINE = "no such file; expected a JSON report of --streamguard-save or --streamguard-json"


def _compare_fail(config: pytest.Config, compare_path: Path | None) -> tuple[Bound, ...]:
    """The bounds that fail a comparison, which needs a baseline (``compare_path``)."""
    given = _raw(config, "streamguard_compare_fail")
    if not given.raw.strip():
        return ()
    if compare_path is None:
        raise pytest.UsageError(
            f"streamguard_compare_fail ({given.source}) needs streamguard_compare: "
            "the baseline report to compare with"
        )
    try:
        return parse_bounds(given.raw)
    except ValueError as exc:
        raise given.invalid(f"{exc}") from None


def _compare_min_samples(config: pytest.Config) -> int:
    """The fewest samples a compared figure needs to fail the run."""
    given = _raw(config, "streamguard_compare_min_samples")
    if not given.raw.strip().isdigit() or int(given.raw) < 1:
        raise given.invalid("expected an integer >= 1")
    return int(given.raw)


def _proxy_host(config: pytest.Config) -> str:
    """The address the proxies listen on, which cannot be left empty."""
    proxy_host = _host(config, "streamguard_proxy_host")
    if proxy_host is None:
        source = _raw(config, "streamguard_proxy_host").source
        raise pytest.UsageError(
            f"streamguard_proxy_host ({source}) is empty: expected a host name or an IP "
            f"address, such as {DEFAULT_PROXY_HOST}"
        )
    return proxy_host


def _ray_address(config: pytest.Config) -> str | None:
    """``auto``, ``local`` or a Ray cluster's address (None: loads stay in this process)."""
    given = _raw(config, "streamguard_ray")
    ray_address = given.raw.strip() or None
    if ray_address is not None and (
        any(c.isspace() for c in ray_address)
        or (ray_address not in ("auto", "local") and ":" not in ray_address)
    ):
        raise given.invalid(
            "expected 'auto', 'local' or a Ray cluster address such as 127.0.0.1:6379 or "
            "ray://head:10001"
        )
    return ray_address


def _unchecked(config: pytest.Config) -> str:
    """What a ``fail_on`` gate that could not be checked does: ``warn`` or ``fail``."""
    given = _raw(config, "streamguard_unchecked")
    mode = given.raw.strip().lower()
    if mode not in ("warn", "fail"):
        raise given.invalid("expected 'warn' or 'fail'")
    return mode


def _fail_on(config: pytest.Config) -> tuple[str, ...]:
    """The findings that fail a test even within its deadlines."""
    given = _raw(config, "streamguard_fail_on")
    try:
        return parse_fail_on(given.raw, where=f"{given.raw!r} from {given.source}")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
