"""The app under test: a running URL, a user command the plugin starts, or the bundled target.

Readiness: the ready path (``--streamguard-ready-path``) is polled until it answers 2xx. A
refused connection or a 5xx is waited on (a server still starting), up to the startup timeout;
a 4xx answered for :data:`~pytest_streamguard.services.processes.CLIENT_ERROR_FAIL_S` seconds
fails at once with a hint naming the option, since no waiting turns a wrong path into a right
one.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from pytest_streamguard.common.tls import tls_context
from pytest_streamguard.errors import ClientErrorAnswer, ReadyPathError, StartupError
from pytest_streamguard.services.output import OutputLog, follow
from pytest_streamguard.services.processes import (
    CLIENT_ERROR_FAIL_S,
    ManagedProcess,
    free_port,
    listening_sockets,
    listening_url,
    poll_until_ok,
)

BUNDLED_TARGET_HINT = (
    "the bundled target needs the 'target' extra (pip install 'pytest-streamguard[target]', or "
    "'./pytest-streamguard[target]' from a clone); or test your own app with "
    "--streamguard-target-cmd or --streamguard-target-url"
)

READY_PATH_HINT = (
    "hint: the plugin polls the ready path until it answers 2xx; point "
    "--streamguard-ready-path (ini streamguard_ready_path) at a path your app answers 2xx once "
    "it is ready, such as /health or /, or /v1/models on an OpenAI-compatible server such as "
    "llama-cpp-python's (where /health and / answer 404)"
)


def bundled_target_root() -> Path:
    """The folder that holds the bundled ``target_app`` package.

    An installed wheel has it inside the plugin (``pytest_streamguard/_bundled/``), so installing
    the plugin puts no top-level ``target_app`` into the user's environment; a source checkout
    (the editable development install) has the repository's ``target_app/`` beside
    ``pytest_streamguard/``."""
    package = Path(__file__).resolve().parent.parent
    for root in (package / "_bundled", package.parent):
        if (root / "target_app" / "__main__.py").is_file():
            return root
    raise StartupError(
        f"the bundled target is missing from this installation of the plugin ({package}): "
        "reinstall pytest-streamguard"
    )


@dataclass
class Target:
    """The target app as the test sees it: its direct URL (not through the proxy)."""

    url: str
    kind: str
    description: str
    process: ManagedProcess | None = field(default=None, repr=False)
    # For restart(): where the started target says it is ready, and how long it may take.
    ready_path: str = "/"
    startup_timeout: float = 60.0
    #: The log files followed for a target given by URL (``streamguard_log_files``), by name.
    followed: dict[str, OutputLog] = field(default_factory=dict, repr=False)
    _unfollow: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def follow(self, files: Sequence[tuple[str, str]]) -> None:
        """Follow each ``(NAME, PATH)`` log file from its end until :meth:`stop`."""
        for name, path in files:
            self.followed[name] = OutputLog(name)
            self._unfollow.append(follow(self.followed[name], path, threading.Event()))

    def logs(self, name: str) -> dict[str, OutputLog]:
        """What this target writes, by the hop name its lines are said at: a started process's
        output under ``name``, else the followed log files under their own names."""
        return {name: self.process.output} if self.process is not None else dict(self.followed)

    @property
    def pid(self) -> int | None:
        """Process id of a target the plugin started; None for one given by URL."""
        return self.process.pid if self.process is not None else None

    @property
    def command(self) -> tuple[str, ...]:
        """The command line the plugin ran for this target (``{port}`` filled in, extra flags
        appended); empty for a target given by URL."""
        return tuple(self.process.argv) if self.process is not None else ()

    @property
    def address(self) -> str:
        """``host:port`` of the target, as a Toxiproxy upstream."""
        return self.url.split("://", 1)[1].split("/", 1)[0]

    def metrics(self, path: str = "/metrics") -> dict[str, Metric]:
        """The target's Prometheus metrics (``GET /metrics``), parsed by prometheus_client."""
        response = httpx.get(self.url + path, timeout=10.0, verify=tls_context())
        response.raise_for_status()
        return {family.name: family for family in text_string_to_metric_families(response.text)}

    def stop(self) -> None:
        """Stop the target if the plugin started it, and stop following its log files."""
        while self._unfollow:
            self._unfollow.pop()()
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        """SIGKILL the process group of the target the plugin started, at once: a crash. Its
        open connections end; :meth:`restart` starts it again."""
        if self.process is not None:
            self.process.kill()

    def restart(self) -> None:
        """Start the target the plugin started again, after :meth:`kill` (or killing it now):
        the same command, environment, working directory and port; return once its ready path
        answers 2xx, or raise StartupError."""
        old = self.process
        if old is None:
            raise StartupError(f"the target at {self.url} was not started by the plugin")
        old.kill()
        old.stop()
        argv = list(old.argv)
        port = self.address.rsplit(":", 1)[1]
        for k in range(len(argv) - 1):
            # The bundled target binds port 0 and prints its port: keep the one it got.
            if argv[k] == "--port" and argv[k + 1] == "0":
                argv[k + 1] = port
        process = ManagedProcess(old.name, argv, env=old.env, cwd=old.cwd, output=old.output)
        self.process = process
        try:
            process.wait_ready(self.url + self.ready_path, self.startup_timeout)
        except StartupError as exc:
            process.stop()
            raise StartupError(f"the target did not come back on {self.url}: {exc}") from None


#: A target given by URL whose port refuses every connection this long is not starting up:
#: nothing listens there, so fail now rather than after the whole startup timeout.
REFUSED_FAIL_S = 3.0


def _wait_url_ready(url: str, timeout: float) -> None:
    started = time.monotonic()
    answered = False

    def refused_too_long(last: str) -> None:
        nonlocal answered
        refused = last.startswith("ConnectError") and "refused" in last.lower()
        answered = answered or not (refused or last == "no answer yet")
        if not answered and refused and time.monotonic() - started >= REFUSED_FAIL_S:
            raise StartupError(
                f"target at {url} (--streamguard-target-url) refused every connection for "
                f"{REFUSED_FAIL_S:g} s: nothing listens there\n"
                "hint: start your app before pytest, check the host and port, or let the "
                "plugin start it with --streamguard-target-cmd"
            )

    try:
        last = poll_until_ok(
            url, timeout, before_each=refused_too_long, client_error_fail_s=CLIENT_ERROR_FAIL_S
        )
    except ClientErrorAnswer as answer:
        raise StartupError(
            f"target at {url} (--streamguard-target-url) answered HTTP {answer.status} for "
            f"{answer.seconds:g} s: a 4xx means the path is wrong, not that the app is still "
            f"starting\n{READY_PATH_HINT}"
        ) from None
    if last is not None:
        raise StartupError(
            f"target at {url} (--streamguard-target-url) did not answer 2xx within "
            f"{timeout:g} s (last: {last})"
        )


class TargetSettings(Protocol):
    """What :func:`start_target` reads of the plugin's settings
    (:class:`pytest_streamguard.plugin.settings.Settings` has it all)."""

    @property
    def target_url(self) -> str | None: ...
    @property
    def target_cmd(self) -> tuple[str, ...] | None: ...
    @property
    def target_args(self) -> tuple[str, ...]: ...
    @property
    def target_cwd(self) -> Path | None: ...
    @property
    def ready_path(self) -> str: ...
    @property
    def startup_timeout(self) -> float: ...
    @property
    def target_description(self) -> str: ...


def start_target(
    settings: TargetSettings,
    extra_args: Sequence[str] = (),
    *,
    name: str = "target",
    host: str = "127.0.0.1",
) -> Target:
    """Point at, or start, the target the settings name, and wait until it is ready.

    A target the plugin starts gets ``--streamguard-target-args`` and then ``extra_args``
    appended to its command line; a target given by URL cannot take flags (ValueError).
    ``name`` is what its errors call a started command (a stack's ``service model``); a
    command with ``{port}`` is reached at ``host`` (where a stack's service was told to listen)."""
    flags = [*settings.target_args, *extra_args]
    if settings.target_url is not None:
        if flags:
            raise ValueError(
                f"cannot start the target with flags {shlex.join(flags)}: it is given by URL "
                f"({settings.target_url}); extra flags need the bundled target or "
                "--streamguard-target-cmd"
            )
        _wait_url_ready(settings.target_url + settings.ready_path, settings.startup_timeout)
        return Target(
            settings.target_url,
            "url",
            settings.target_description,
            ready_path=settings.ready_path,
            startup_timeout=settings.startup_timeout,
        )
    description = settings.target_description
    if extra_args:
        description += f" with {shlex.join(extra_args)}"
    for _ in range(PORT_TRIES - 1):
        try:
            return _start(settings, flags, description, name, host)
        except StartupError as exc:
            # The free port chosen for a command was taken by another process before the
            # command bound it (port 0 cannot be handed over): try again on another.
            taken = any(word in str(exc).lower() for word in PORT_TAKEN)
            if settings.target_cmd is None or not taken:
                raise
    return _start(settings, flags, description, name, host)


def _start(
    settings: TargetSettings, flags: list[str], description: str, name: str, host: str
) -> Target:
    """Start the bundled target or the settings' command with ``flags``, and wait until it
    is ready (see :func:`start_target`)."""
    find_port: Callable[[], str] | None = None
    if settings.target_cmd is not None:
        argv = _with_pytests_python(list(settings.target_cmd))
        fixed_url = None
        port = free_port()
        if any("{port}" in arg for arg in argv):
            argv = [arg.replace("{port}", str(port)) for arg in argv]
            fixed_url = f"http://{host}:{port}"
        # PORT is what most frameworks read (Node, Express, Next.js, Go and Ruby apps, Heroku's
        # and Cloud Run's convention), so an app that reads it binds the port chosen here.
        process = ManagedProcess(
            name, [*argv, *flags], env={"PORT": str(port)}, cwd=settings.target_cwd
        )
        kind = "command"
        if fixed_url is None:
            find_port = functools.partial(_find_port, process, port)
    else:
        # -P keeps the working directory off sys.path, so a user's own `target_app` folder
        # cannot stand in for the bundled one.
        argv = [sys.executable, "-P", "-m", "target_app", "--host", "127.0.0.1", "--port", "0"]
        fixed_url = None
        process = ManagedProcess("bundled target_app", [*argv, *flags], env=bundled_target_env())
        kind = "bundled"
    try:
        if find_port is not None:
            url = find_port()
        else:
            url = fixed_url or process.wait_for_line(listening_url, settings.startup_timeout)
        process.wait_ready(
            url + settings.ready_path,
            settings.startup_timeout,
            client_error_fail_s=CLIENT_ERROR_FAIL_S,
        )
    except ReadyPathError as exc:
        process.stop()
        raise StartupError(f"{exc}\n{READY_PATH_HINT}") from None
    except StartupError as exc:
        process.stop()
        if kind == "bundled":
            raise StartupError(f"{exc}\nhint: {BUNDLED_TARGET_HINT}") from None
        raise
    except BaseException:
        process.stop()
        raise
    return Target(
        url,
        kind,
        description,
        process,
        ready_path=settings.ready_path,
        startup_timeout=settings.startup_timeout,
    )


#: How many ports a started command is given in turn when it fails to start because the free
#: port chosen for it was taken meanwhile (its output says so in one of ``PORT_TAKEN``'s words).
PORT_TRIES = 3
PORT_TAKEN = ("address already in use", "eaddrinuse")

#: How long a command without ``{port}`` has to show its port (a listening line or a listening
#: socket) before the start fails with a hint, instead of waiting out the startup timeout.
PORT_DISCOVERY_S = 15.0

PORT_HINT = (
    "hint: the plugin finds your app's port from '{port}' in --streamguard-target-cmd "
    "(replaced by a free port, e.g. 'python app.py --port {port}'), from the PORT environment "
    "variable it sets for the command (PORT=%d here; most frameworks read it, or write "
    "'env PORT={port} node server.js'), from a line your app prints such as "
    "'listening on http://127.0.0.1:8080', or from the socket the app listens on; an app "
    "that binds later than %g s after its start needs '{port}' or PORT"
)


def _find_port(process: ManagedProcess, port: int) -> str:
    """The URL of a started command without ``{port}``: a listening line, else its own socket.

    The socket wins when the process group listens on exactly one port, or on the ``PORT`` it
    was given; several ports and no line keep the wait going (a metrics port beside the app's)."""

    def listening_socket() -> str | None:
        sockets = listening_sockets(process.pid)
        ports = {found for _, found in sockets}
        chosen = port if port in ports else ports.pop() if len(ports) == 1 else None
        if chosen is None:
            return None
        # One port on several addresses (0.0.0.0 and ::): any of them answers.
        host = next(host for host, found in sockets if found == chosen)
        return f"http://{host}:{chosen}"

    try:
        return process.wait_for_line(
            listening_url,
            PORT_DISCOVERY_S,
            probe=listening_socket,
            waiting_for="printed no listening line and opened no listening socket",
        )
    except StartupError as exc:
        if process.popen.poll() is not None:
            raise  # it crashed: its output says why, not the port
        found = sorted({found for _, found in listening_sockets(process.pid)})
        several = f" (it listens on ports {', '.join(map(str, found))})" if found else ""
        raise StartupError(f"{exc}{several}\n{PORT_HINT % (port, PORT_DISCOVERY_S)}") from None


def _with_pytests_python(argv: list[str]) -> list[str]:
    """``argv`` with a leading ``python`` or ``python3`` run by the interpreter running pytest.

    ``.venv/bin/pytest`` without an activated virtual environment would otherwise start
    whatever ``python`` PATH finds first, without the app's packages."""
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    return argv


def bundled_target_env() -> dict[str, str]:
    """``PYTHONPATH`` for a ``python -P -m target_app`` that runs the bundled target (and
    no ``target_app`` folder of the working directory)."""
    return {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(bundled_target_root()), os.environ.get("PYTHONPATH")])
        )
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``streamguard-target [flags]``: the bundled target by hand, from any installation
    (``python -m target_app`` works only in a checkout). Runs it in place of this process,
    so signals reach the target itself, and its usage and error lines name
    ``streamguard-target``; its flags are documented in docs/target.md."""
    args = list(sys.argv[1:] if argv is None else argv)
    missing = [
        m for m in ("torch", "transformers", "uvicorn") if importlib.util.find_spec(m) is None
    ]
    if missing:
        print(
            f"streamguard-target: {', '.join(missing)} not installed: {BUNDLED_TARGET_HINT}",
            file=sys.stderr,
        )
        return 2
    try:
        env = {
            **os.environ,
            **bundled_target_env(),
            "STREAMGUARD_TARGET_PROG": "streamguard-target",
        }
    except StartupError as exc:
        print(f"streamguard-target: {exc}", file=sys.stderr)
        return 2
    command = [sys.executable, "-P", "-m", "target_app", *args]
    os.execve(sys.executable, command, env)
    return 0  # not reached: execve replaced this process
