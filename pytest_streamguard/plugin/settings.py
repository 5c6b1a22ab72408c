"""Command-line options, ini keys and the frozen settings resolved from them.

Every option is a CLI flag registered with ``default=None`` plus an ini key of the same name
that carries the real default, sharing one help text. :func:`resolve_settings` reads them once
(CLI wins over ini, ini over the default) and validates each value, raising
:class:`pytest.UsageError` that names the value, where it came from and what is accepted.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import shlex
from dataclasses import dataclass
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
from pytest_streamguard.common.names import KNOWN, parse_fail_on
from pytest_streamguard.report.bounds import Bound, parse_bounds
from pytest_streamguard.services.stack_spec import ServiceSpec, parse_ready_paths, parse_services

ENABLE_HELP = (
    "Turn pytest-streamguard on: start the target behind Toxiproxy and check stream deadlines"
)
TARGET_URL_HELP = "Base URL of a target app that is already running (no process is started)"
TARGET_CMD_HELP = (
    "Command that starts the target app (no shell); '{port}' is replaced by a free port, which "
    "is also in the PORT environment variable; without '{port}' the port is read from a "
    "listening line the app prints or from its listening socket (within 15 s). A leading "
    "'python' is the interpreter running pytest. "
    "Default: the bundled target_app with the tiny model"
)
TARGET_ARGS_HELP = (
    "Extra command-line flags for the target the plugin starts (the bundled target_app or "
    "--streamguard-target-cmd), split like a shell would, e.g. '--model gpt2 --heartbeat 0.5'; "
    "a single flag is taken as typed ('--accel-off'); one that is also a pytest option ('-v') "
    "needs the = form: --streamguard-target-args=-v"
)
TARGET_CWD_HELP = (
    "Working directory of --streamguard-target-cmd and of the --streamguard-service commands "
    "(a relative command path such as 'node server.js' is found there); the option is "
    "relative to the directory pytest runs in, the ini key to the ini file's directory. "
    "Default: the directory pytest runs in"
)
SERVICES_HELP = (
    "A service of a stack, NAME=COMMAND, repeatable, in start order (ini streamguard_services: "
    "one 'NAME = COMMAND' per line); in COMMAND '{port}' is the service's own port (as for "
    "--streamguard-target-cmd) and '{NAME}' an earlier service's host:port through the proxy "
    "the plugin puts in front of it (and a tap that stamps the answers), so "
    "streamguard.hop(NAME).faults act on that hop. The last "
    "service is the entry clients reach. Not with --streamguard-target-url/-cmd/-args. "
    "Default: no stack"
)
SERVICE_READY_HELP = (
    "A service's own ready path, NAME=PATH, repeatable (ini streamguard_service_ready: one "
    "'NAME = PATH' per line). Default: --streamguard-ready-path"
)
SEED_HELP = (
    "Seed of every random draw the plugin and its embedded Toxiproxy make (latency jitter, "
    "toxicity, slicer sizes, open-loop arrival times), so a run can be repeated; shown in the "
    "header and stored in the JSON report. A real toxiproxy-server's draws are its own. "
    "Default: a new seed each run"
)
CLIENT_HELP = (
    "Who judges each stream once it is read: auto (the official client library of the "
    "stream's format where it is installed, the plugin's reader otherwise), a client's name "
    "(openai, anthropic, google-genai, ollama, huggingface_hub, mistralai, groq, or one "
    "registered), or none (the plugin's reader alone). A stream's client= overrides it. "
    "Default: auto"
)
TRANSCRIPTS_HELP = (
    "Save the recorded response of every stream whose reader and judging client disagree "
    "(with no documented rule for it) as a transcript in this directory "
    "(<test>/<stream>.json and .body; Recorded.load reads it back); the summary's line names "
    "it. Default: none saved"
)
READY_PATH_HELP = (
    "Path polled on the target until it answers 2xx (a 4xx for 3 s fails the start). "
    "Default: /readyz"
)
STARTUP_TIMEOUT_HELP = "Seconds to wait for a started process to be ready. Default: 120"
PROBE_HELP = (
    "A light request sent to the target every --streamguard-probe-interval beside the streams "
    "of every test and load, straight to the target (never through the fault proxy), so the "
    "findings can tell a blocked event loop (the probe waits) from a full server (it answers "
    "at once): 'off', 'tcp' (a TCP connect; the kernel answers it, so it cannot see a blocked "
    "loop) or a PATH to GET. Default: the target's ready path, or /health where that is a "
    "model route such as /v1/models (llama-cpp-python ends the stream in progress to answer it)"
)
PROBE_INTERVAL_HELP = "Seconds between two probes. Default: 0.05"
TOXIPROXY_HELP = (
    "URL of a running toxiproxy-server API (e.g. http://127.0.0.1:8474). "
    "Default: start the embedded one"
)
PROXY_HOST_HELP = (
    "Address the session's Toxiproxy proxies listen on and clients dial, for a Toxiproxy on "
    "another host or in a container (a wildcard such as 0.0.0.0 listens everywhere; clients "
    "then dial the Toxiproxy API's host). Default: 127.0.0.1"
)
PROXY_PORTS_HELP = (
    "Ports the session's proxies listen on, LOW-HIGH (e.g. 20000-20019): each proxy takes the "
    "first one free on the Toxiproxy host, for a Toxiproxy whose ports are mapped one to one "
    "(a container's published range). Default: a free port chosen by Toxiproxy"
)
UPSTREAM_HOST_HELP = (
    "Address Toxiproxy uses to reach the target (the proxies' upstream host), e.g. the CI "
    "runner as seen from a Toxiproxy container; the target's port is kept. "
    "Default: the target's own host"
)
RAY_HELP = (
    "Shard every streamguard.load()/aload() over a Ray cluster (the 'ray' extra): 'auto' joins "
    "the running cluster, 'local' starts one on this machine, or a cluster address such as "
    "127.0.0.1:6379 or ray://head:10001. Default: off"
)
TTFT_HELP = "TTFT deadline in seconds for a bare @pytest.mark.token_deadline. Default: 0.5"
CHUNK_HELP = (
    "Per-chunk gap deadline in seconds for a bare @pytest.mark.token_deadline. Default: 0.2"
)
MAX_STREAM_HELP = (
    "Seconds any one stream may stay open when its test sets no total deadline; a stream still "
    "open then ends as a timeout (so a stream that never ends cannot hang the run). Default: 300"
)
JSON_HELP = "Write a versioned JSON report with every trace's raw stamps and stats to this path"
HTML_HELP = (
    "Write a self-contained HTML report (summary table, per-test timeline plots) to this path"
)
PROFILES_HELP = (
    "Directory of your own fault profiles for @pytest.mark.streamguard_matrix: each *.json "
    "file is a profile named by its stem (a list of Toxiproxy toxics); the ini key is relative "
    "to the ini file. Default: only the built-in profiles"
)
SAVE_HELP = "Save this run's per-test figures (the JSON report) as a baseline to this path"
COMPARE_HELP = (
    "Compare each test's TTFT p50/p95 and gap p95/max with the baseline saved at this path "
    "(by --streamguard-save or --streamguard-json) and show the changes"
)
COMPARE_FAIL_HELP = (
    "With --streamguard-compare: fail the run when a figure got worse than its bound, e.g. "
    "'ttft_p95:20%,gap_p95:30%,gap_max:0.1s' (metrics ttft_p50, ttft_p95, gap_p95, gap_max; "
    "units %, s, ms; and headroom:N%, how much a test's headroom may drop), or when it "
    "compared nothing (no test in the baseline, a gated figure "
    "without samples)"
)
COMPARE_MIN_SAMPLES_HELP = (
    "A compared figure from fewer samples than this (in either run) is shown but never fails "
    "the run. Default: 5"
)
FAIL_ON_HELP = (
    "Findings that fail a test even within its deadlines, comma-separated: "
    + ", ".join(KNOWN)
    + " (see docs/findings.md); the marker's fail_on= adds to them. Default: none"
)
UNCHECKED_HELP = (
    "What a finding the fail_on gates name does when the test could not check it on this "
    "target (not_cancelled without the target's gauges, backpressure without a throttle or "
    "the server's send stamps, queued without the probe, a group finding over too few "
    "streams): warn (the summary says 'not checked: <finding> (<reason>)') or fail (the test "
    "fails, naming each). Default: warn"
)
STRICT_FAULTS_HELP = (
    "Fail a test whose faults never fired (a cut longer than the answer, a stall after more "
    "chunks than came, a fault active on no stream), naming each fault and why; without it a "
    "fault that never fired is a warning line in the summary. Default: off"
)
JSON_TEXT_HELP = (
    "Keep every chunk's text and payload in the JSON report (--streamguard-json, "
    "--streamguard-save); without it they are kept only for the streams that failed (a "
    "stream that did not complete, every stream of a test that did not pass), and a passing "
    "stream's chunks are their stamps, sizes and the server's send stamps. Default: off"
)
REQUIRE_HELP = (
    "Make it an error to collect tests that need pytest-streamguard while it is off (no "
    "--streamguard): a usage error, exit code 4 (under pytest-xdist each such test errors at "
    "setup), for a CI job that must not go green by skipping them. Default: off (such tests "
    "are skipped, and the summary says so)"
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
    "streamguard_compare_min_samples": (
        COMPARE_MIN_SAMPLES_HELP,
        str(DEFAULT_COMPARE_MIN_SAMPLES),
    ),
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


def _invalid(raw: str, source: str, key: str, why: str) -> pytest.UsageError:
    """The usage error for a bad setting: the value, where it came from (the option or the ini
    file), the ini key, and ``why`` (what is wrong and what is accepted)."""
    return pytest.UsageError(f"{raw!r} from {source} is not a valid {key}: {why}")


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--streamguard*`` option and its ``streamguard_*`` ini key."""
    group = parser.getgroup("streamguard", "token-stream deadlines under network faults")
    group.addoption("--streamguard", action="store_true", default=None, help=ENABLE_HELP)
    parser.addini("streamguard", ENABLE_HELP, type="bool", default=False)
    for dest, help_text in _FLAG_OPTIONS.items():
        flag = "--" + dest.replace("_", "-")
        group.addoption(flag, dest=dest, action="store_true", default=None, help=help_text)
        parser.addini(dest, help_text, type="bool", default=False)
    for dest, (help_text, default) in _VALUED_OPTIONS.items():
        flag = "--" + dest.replace("_", "-")
        # argparse %-formats option help (a '%' in an example must be doubled), ini help not.
        group.addoption(flag, dest=dest, default=None, help=help_text.replace("%", "%%"))
        parser.addini(dest, help_text, default=default)
    for dest, (flag, help_text) in _LIST_OPTIONS.items():
        group.addoption(flag, dest=dest, action="append", default=None, help=help_text)
        parser.addini(dest, help_text, type="linelist", default=[])
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


def _raw(config: pytest.Config, dest: str) -> tuple[str, str]:
    """The raw string for one setting and where it came from (CLI over ini over default)."""
    value = config.getoption(dest)
    if value is not None:
        return str(value), f"--{dest.replace('_', '-')}"
    ini_value = str(config.getini(dest))
    if ini_value == _VALUED_OPTIONS[dest][1]:
        return ini_value, "default"
    return ini_value, f"ini key {dest}"


#: Seeds are 32-bit, as Go's toxiproxy-server -seed and numpy take them.
SEED_LIMIT = 2**32
#: Where a pytest-xdist controller hands its seed to its workers (``workerinput``).
SEED_WORKERINPUT = "streamguard_seed"


def _seed(config: pytest.Config) -> int:
    """The run's seed: the option, else the controller's (an xdist worker), else a new one."""
    raw, source = _raw(config, "streamguard_seed")
    if not raw:
        handed = getattr(config, "workerinput", {}).get(SEED_WORKERINPUT)
        if handed is not None:
            return int(handed)
        return int.from_bytes(os.urandom(4), "big")
    try:
        seed = int(raw)
    except ValueError:
        seed = -1
    if not 0 <= seed < SEED_LIMIT:
        raise _invalid(
            raw, source, "streamguard_seed", f"expected a whole number from 0 to {SEED_LIMIT - 1}"
        )
    return seed


def _target_cwd(config: pytest.Config, has_cmd: bool) -> Path | None:
    """The target command's working directory: the option relative to the invocation
    directory, the ini key relative to the ini file's (as the profile folder); it must exist."""
    raw, source = _raw(config, "streamguard_target_cwd")
    if not raw:
        return None
    if not has_cmd:
        raise pytest.UsageError(
            f"streamguard_target_cwd ({source}) needs streamguard_target_cmd: it is the working "
            "directory of the command that starts your app"
        )
    if source.startswith("--"):
        base = config.invocation_params.dir
    else:
        base = config.inipath.parent if config.inipath is not None else config.rootpath
    path = (base / raw).resolve()
    if not path.is_dir():
        raise _invalid(raw, source, "streamguard_target_cwd", f"{path} is not a directory")
    return path


def _positive_seconds(config: pytest.Config, dest: str) -> float:
    raw, source = _raw(config, dest)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise _invalid(raw, source, dest, "expected a positive number of seconds")
    return value


def _http_url(raw: str, source: str, dest: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid(raw, source, dest, "expected an http(s) URL such as http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as exc:
        raise _invalid(
            raw, source, dest, f"{exc}; expected an http(s) URL such as http://127.0.0.1:8000"
        ) from None
    return raw.rstrip("/")


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _host(config: pytest.Config, dest: str) -> str | None:
    """A host name or IP address, without a port (None when empty)."""
    raw, source = _raw(config, dest)
    host = raw.strip()
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        valid = len(host) <= 253 and all(
            _HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split(".")
        )
    else:
        valid = True
    if not valid:
        raise _invalid(
            raw,
            source,
            dest,
            "expected a host name or an IP "
            "address without a port or scheme, such as 127.0.0.1, ::1 or toxiproxy.ci.internal",
        )
    return host


def _port_range(config: pytest.Config, dest: str) -> range | None:
    """``LOW-HIGH`` (or one port) as the range of ports it names (None when empty)."""
    raw, source = _raw(config, dest)
    text = raw.strip()
    if not text:
        return None
    low, dash, high = text.partition("-")
    if not dash:
        high = low
    if not (low.strip().isdigit() and high.strip().isdigit()) or not (
        1 <= int(low) <= int(high) <= 65535
    ):
        raise _invalid(
            raw,
            source,
            dest,
            "expected a port range LOW-HIGH "
            "with 1 <= LOW <= HIGH <= 65535, such as 20000-20019, or one port",
        )
    return range(int(low), int(high) + 1)


def _client(config: pytest.Config, enabled: bool) -> str:
    """``--streamguard-client``: auto, none, or an installed judge's name. Checked only while
    the plugin is on: nothing is judged while it is off, and the judges' registry (and what it
    imports) must not load on every ``pytest`` start."""
    raw, source = _raw(config, "streamguard_client")
    if not enabled:
        return raw.strip()
    # Imported here, not at the top: see the docstring (the plugin's off path stays light).
    from pytest_streamguard.judge.registry import check_client

    try:
        return check_client(raw.strip(), source)
    except ValueError as exc:
        raise _invalid(raw, source, "streamguard_client", str(exc).split(": ", 1)[1]) from None


def _transcripts(config: pytest.Config) -> Path | None:
    """Where disagreements' transcripts go: a directory, made when needed (None when empty)."""
    raw, source = _raw(config, "streamguard_transcripts")
    if raw and Path(raw).exists() and not Path(raw).is_dir():
        raise _invalid(
            raw, source, "streamguard_transcripts", "it is a file; expected a directory path"
        )
    return Path(raw) if raw else None


def _flag(config: pytest.Config, dest: str) -> bool:
    """A boolean setting: the CLI flag when given, else the ini key (default in the ini)."""
    value = config.getoption(dest)
    if value is not None:
        return bool(value)
    try:
        return bool(config.getini(dest))
    except (ValueError, pytest.UsageError) as exc:  # pytest's words for a value not a truth
        raise pytest.UsageError(
            f"ini key {dest}: {exc}; expected true or false (or yes/no, on/off, 1/0)"
        ) from None


def _split(raw: str, source: str, key: str, expected: str) -> tuple[str, ...]:
    """Split a command line like a shell would (no shell runs it); a UsageError otherwise."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise _invalid(raw, source, key, f"{exc}; expected {expected}") from None


def resolve_settings(config: pytest.Config) -> Settings:
    """Read and validate every option once; raise :class:`pytest.UsageError` on a bad value.

    The options are checked in a fixed order (the target, its readiness, the probe, Toxiproxy,
    the reports and the comparison, the proxies, Ray, the findings, then the rest), so a
    command line with several bad values always names the same one first.
    """
    target_url, target_cmd = _target(config)
    target_args = _target_args(config, target_url)
    services = _services(config, target_url, target_cmd, target_args)
    ready_path = _ready_path(config)
    probe = _probe(config)
    toxiproxy_url = _toxiproxy_url(config)
    json_path = _optional_path(config, "streamguard_json")
    html_path = _html_path(config)
    save_path = _optional_path(config, "streamguard_save")
    compare_path = _compare_path(config)
    compare_fail = _compare_fail(config, compare_path)
    compare_min_samples = _compare_min_samples(config)
    proxy_host = _proxy_host(config)
    ray_address = _ray_address(config)
    fail_on = _fail_on(config)
    return Settings(
        probe=probe,
        probe_interval=_positive_seconds(config, "streamguard_probe_interval"),
        fail_on=fail_on,
        unchecked=_unchecked(config),
        ray_address=ray_address,
        proxy_host=proxy_host,
        proxy_ports=_port_range(config, "streamguard_proxy_ports"),
        upstream_host=_host(config, "streamguard_upstream_host"),
        compare_fail=compare_fail,
        compare_min_samples=compare_min_samples,
        save_path=save_path,
        compare_path=compare_path,
        enabled=_flag(config, "streamguard"),
        strict_faults=_flag(config, "streamguard_strict_faults"),
        require=_flag(config, "streamguard_require"),
        json_text=_flag(config, "streamguard_json_text"),
        target_cwd=_target_cwd(config, target_cmd is not None or bool(services)),
        services=services,
        seed=_seed(config),
        client=_client(config, _flag(config, "streamguard")),
        transcripts=_transcripts(config),
        target_url=target_url,
        target_cmd=target_cmd,
        ready_path=ready_path,
        startup_timeout=_positive_seconds(config, "streamguard_startup_timeout"),
        toxiproxy_url=toxiproxy_url,
        ttft=_positive_seconds(config, "streamguard_ttft"),
        chunk=_positive_seconds(config, "streamguard_chunk"),
        json_path=json_path,
        html_path=html_path,
        target_args=target_args,
        max_stream_seconds=_positive_seconds(config, "streamguard_max_stream_seconds"),
    )


def _target(config: pytest.Config) -> tuple[str | None, tuple[str, ...] | None]:
    """The running target's URL or the command that starts one (at most one of them)."""
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
    return target_url, target_cmd


def _lines(config: pytest.Config, dest: str) -> tuple[list[str], str]:
    """A repeatable setting's lines and where they came from (every use of the CLI option
    replaces the ini key's lines)."""
    given = config.getoption(dest)
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
        f"streamguard_{key} ({_raw(config, 'streamguard_' + key)[1]})"
        for key, value in (("target_url", target_url), ("target_cmd", target_cmd))
        if value is not None
    ]
    if target_args:
        single.append(f"streamguard_target_args ({_raw(config, 'streamguard_target_args')[1]})")
    if services and single:
        raise pytest.UsageError(
            f"streamguard_services ({source}) and {', '.join(single)} are both set: a stack's "
            "services replace the single target (its last service is the entry clients reach); "
            "give the services, or one target"
        )
    return services


def _target_args(config: pytest.Config, target_url: str | None) -> tuple[str, ...]:
    """Extra flags for a target the plugin starts (none for a running one at ``target_url``)."""
    target_args_raw, args_source = _raw(config, "streamguard_target_args")
    target_args = _split(
        target_args_raw,
        args_source,
        "streamguard_target_args",
        "flags such as '--heartbeat 0.5 --allow-fault-knobs'",
    )
    if target_args and target_url is not None:
        _, url_source = _raw(config, "streamguard_target_url")
        raise pytest.UsageError(
            f"streamguard_target_args ({args_source}) and streamguard_target_url ({url_source}) "
            "are both set: extra flags apply only to a target the plugin starts"
        )
    return target_args


def _ready_path(config: pytest.Config) -> str:
    """The path polled until the target is ready."""
    ready_path, ready_source = _raw(config, "streamguard_ready_path")
    if not ready_path.startswith("/"):
        raise _invalid(
            ready_path,
            ready_source,
            "streamguard_ready_path",
            "expected a path starting with '/', such as /readyz",
        )
    return ready_path


def _probe(config: pytest.Config) -> str:
    """What the probe sent beside the streams asks: ``off``, ``tcp``, a path, or empty for the
    target's ready path."""
    probe_raw, probe_source = _raw(config, "streamguard_probe")
    probe = probe_raw.strip()
    if probe not in ("", "off", "tcp") and not probe.startswith("/"):
        raise _invalid(
            probe,
            probe_source,
            "streamguard_probe",
            "expected 'off', 'tcp' or a path starting with '/', such as /readyz",
        )
    return probe


def _toxiproxy_url(config: pytest.Config) -> str | None:
    """A running toxiproxy-server's API (plain http), None for the embedded one."""
    toxiproxy_raw, toxiproxy_source = _raw(config, "streamguard_toxiproxy")
    if not toxiproxy_raw:
        return None
    toxiproxy_url = _http_url(toxiproxy_raw, toxiproxy_source, "streamguard_toxiproxy")
    if urlsplit(toxiproxy_url).scheme != "http":
        raise _invalid(
            toxiproxy_raw,
            toxiproxy_source,
            "streamguard_toxiproxy",
            "toxiproxy's API is plain http, such as http://127.0.0.1:8474",
        )
    return toxiproxy_url


def _optional_path(config: pytest.Config, dest: str) -> Path | None:
    """A file path setting as given (None when empty)."""
    raw, _ = _raw(config, dest)
    return Path(raw) if raw else None


def _html_path(config: pytest.Config) -> Path | None:
    """Where the HTML report goes: a file path, not a directory (None when empty)."""
    html_raw, html_source = _raw(config, "streamguard_html")
    if html_raw and Path(html_raw).is_dir():
        raise _invalid(
            html_raw,
            html_source,
            "streamguard_html",
            "it is a directory; expected a file path such as reports/streamguard.html",
        )
    return Path(html_raw) if html_raw else None


def _compare_path(config: pytest.Config) -> Path | None:
    """The baseline report to compare with, which must exist (None when empty)."""
    compare_raw, compare_source = _raw(config, "streamguard_compare")
    if compare_raw and not Path(compare_raw).is_file():
        raise _invalid(
            compare_raw,
            compare_source,
            "streamguard_compare",
            "no such "
            "file; expected a JSON report saved by --streamguard-save or --streamguard-json",
        )
    return Path(compare_raw) if compare_raw else None


def _compare_fail(config: pytest.Config, compare_path: Path | None) -> tuple[Bound, ...]:
    """The bounds that fail a comparison, which needs a baseline (``compare_path``)."""
    fail_raw, fail_source = _raw(config, "streamguard_compare_fail")
    if not fail_raw.strip():
        return ()
    if compare_path is None:
        raise pytest.UsageError(
            f"streamguard_compare_fail ({fail_source}) needs streamguard_compare: "
            "the baseline report to compare with"
        )
    try:
        return parse_bounds(fail_raw)
    except ValueError as exc:
        raise _invalid(fail_raw, fail_source, "streamguard_compare_fail", f"{exc}") from None


def _compare_min_samples(config: pytest.Config) -> int:
    """The fewest samples a compared figure needs to fail the run."""
    min_raw, min_source = _raw(config, "streamguard_compare_min_samples")
    if not min_raw.strip().isdigit() or int(min_raw) < 1:
        raise _invalid(
            min_raw, min_source, "streamguard_compare_min_samples", "expected an integer >= 1"
        )
    return int(min_raw)


def _proxy_host(config: pytest.Config) -> str:
    """The address the proxies listen on, which cannot be left empty."""
    proxy_host = _host(config, "streamguard_proxy_host")
    if proxy_host is None:
        _, proxy_source = _raw(config, "streamguard_proxy_host")
        raise pytest.UsageError(
            f"streamguard_proxy_host ({proxy_source}) is empty: expected a host name or an IP "
            f"address, such as {DEFAULT_PROXY_HOST}"
        )
    return proxy_host


def _ray_address(config: pytest.Config) -> str | None:
    """``auto``, ``local`` or a Ray cluster's address (None: loads stay in this process)."""
    ray_raw, ray_source = _raw(config, "streamguard_ray")
    ray_address = ray_raw.strip() or None
    if ray_address is not None and (
        any(c.isspace() for c in ray_address)
        or (ray_address not in ("auto", "local") and ":" not in ray_address)
    ):
        raise _invalid(
            ray_raw,
            ray_source,
            "streamguard_ray",
            "expected 'auto', "
            "'local' or a Ray cluster address such as 127.0.0.1:6379 or ray://head:10001",
        )
    return ray_address


def _unchecked(config: pytest.Config) -> str:
    """What a ``fail_on`` gate that could not be checked does: ``warn`` or ``fail``."""
    raw, source = _raw(config, "streamguard_unchecked")
    mode = raw.strip().lower()
    if mode not in ("warn", "fail"):
        raise _invalid(raw, source, "streamguard_unchecked", "expected 'warn' or 'fail'")
    return mode


def _fail_on(config: pytest.Config) -> tuple[str, ...]:
    """The findings that fail a test even within its deadlines."""
    fail_on_raw, fail_on_source = _raw(config, "streamguard_fail_on")
    try:
        return parse_fail_on(fail_on_raw, where=f"{fail_on_raw!r} from {fail_on_source}")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
