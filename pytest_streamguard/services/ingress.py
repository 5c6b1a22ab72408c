"""A real nginx ingress hop, for the idle-timeout and buffering faults of production.

:class:`Ingress` starts the Debian nginx binary with a generated config in a private temporary
prefix, listening on 127.0.0.1 and proxying to one upstream (the target app). Placed between
the Toxiproxy proxy and the target, it reproduces two incidents that no Toxiproxy toxic can:

- ``read_timeout`` (nginx ``proxy_read_timeout``) cuts a stream whose server is silent for
  longer than that between two writes; the client sees the body end early.
- ``buffering=True, gzip=True`` (``proxy_buffering on`` + ``gzip on`` for event streams) holds a
  whole SSE stream until its end on nginx 1.22, unless the upstream answers with
  ``X-Accel-Buffering: no``. Buffering alone still forwards SSE as it comes.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pytest_streamguard.common.numbers import finite
from pytest_streamguard.errors import IngressError
from pytest_streamguard.services.processes import Reaper, free_port, stop_group
from pytest_streamguard.stream.trace import FaultRecord

__all__ = ["Ingress", "IngressError", "IngressHop"]

#: Where Debian's nginx lives; ``/usr/sbin`` is often missing from a non-root ``PATH``.
NGINX_FALLBACK_PATHS: tuple[str, ...] = ("/usr/sbin/nginx",)

_NOT_FOUND = (
    "nginx not found: install Debian's nginx-light (apt-get install nginx-light) or pass nginx=PATH"
)
_GZIP_TYPES = "text/event-stream application/json text/plain"
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_BIND_ATTEMPTS = 5
_LOG_TAIL_LINES = 20
# Timeouts are written to the config in whole milliseconds, nginx's finest unit.
_MIN_TIMEOUT_S = 0.001


class Ingress:
    """A real nginx between a client (or Toxiproxy) and one HTTP upstream.

    ``upstream`` is ``host:port`` or ``http://host:port`` (the target app's URL).
    ``read_timeout`` becomes ``proxy_read_timeout`` (silence allowed between two reads from the
    upstream), ``send_timeout`` becomes ``send_timeout`` (between two writes to the client, a
    slow reader), both in seconds. ``buffering`` sets ``proxy_buffering``; ``gzip`` turns on
    compression of event streams, JSON and plain text. ``nginx`` is the binary to run (default:
    ``nginx`` on ``PATH``, then ``/usr/sbin/nginx``).

    Use as a context manager, or call :meth:`start` and :meth:`stop` (always, in ``finally``).

    nginx keeps a pending read deadline when re-arming it would move it by less than 300 ms
    (``NGX_TIMER_LAZY_DELAY``), so after a run of quick writes the cut can come as early as
    ``read_timeout - 0.3`` s into a silence; a silence longer than ``read_timeout`` is always cut.
    """

    def __init__(
        self,
        upstream: str,
        *,
        read_timeout: float = 60.0,
        send_timeout: float = 60.0,
        buffering: bool = False,
        gzip: bool = False,
        nginx: str | None = None,
    ) -> None:
        self.upstream = _parse_upstream(upstream)
        self.read_timeout = _check_timeout("read_timeout", read_timeout)
        self.send_timeout = _check_timeout("send_timeout", send_timeout)
        self.buffering = _check_bool("buffering", buffering)
        self.gzip = _check_bool("gzip", gzip)
        if nginx is not None and (not isinstance(nginx, str) or not nginx):
            raise ValueError(f"nginx must be a path to the nginx binary or None, got {nginx!r}")
        self._nginx = nginx
        self._prefix: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    def start(self) -> Self:
        """Start nginx and return once its port accepts connections.

        Raises :class:`IngressError` when nginx is missing, exits, or is not ready in time."""
        if self._proc is not None:
            raise IngressError("ingress already started; call stop() before starting it again")
        binary = self._resolve_binary()
        self._prefix = Path(tempfile.mkdtemp(prefix="streamguard-nginx-"))
        # If pytest dies, the reaper deletes the prefix (and stops nginx, registered below).
        Reaper.get().watch_dir(self._prefix)
        try:
            if os.geteuid() == 0:
                # As root the worker runs as 'nobody' and must traverse the prefix to reach
                # its temp directories (nginx chowns those itself); mkdtemp makes it 0700.
                self._prefix.chmod(0o711)
            for _ in range(_BIND_ATTEMPTS):
                # nginx cannot listen on port 0: a free port is handed over, and one another
                # process took meanwhile is retried (nginx's error log says so).
                if self._launch(binary, free_port()):
                    return self
            raise IngressError(
                f"nginx could not bind a free port on 127.0.0.1 in {_BIND_ATTEMPTS} attempts"
            )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop nginx (SIGTERM, then SIGKILL after a timeout) and delete its prefix directory.

        Safe to call more than once, and on an ingress that never started."""
        try:
            self._terminate()
        finally:
            if self._prefix is not None:
                shutil.rmtree(self._prefix, ignore_errors=True)
                Reaper.get().forget_dir(self._prefix)
                self._prefix = None
            self._port = None

    def __enter__(self) -> Self:
        """Start nginx; :meth:`stop` runs on exit."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop nginx and remove its files."""
        self.stop()

    def __repr__(self) -> str:
        """Settings and, while running, the listening address."""
        where = f"127.0.0.1:{self._port}" if self._port is not None else "stopped"
        return (
            f"Ingress({self.upstream!r}, read_timeout={self.read_timeout:g}, "
            f"send_timeout={self.send_timeout:g}, buffering={self.buffering}, "
            f"gzip={self.gzip}) at {where}"
        )

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"`` where nginx listens (a Toxiproxy proxy's ``upstream``)."""
        if self._port is None:
            raise IngressError("ingress not started: call start() or use it as a context manager")
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        """``"http://127.0.0.1:PORT"``, the ingress as an HTTP base URL."""
        return f"http://{self.address}"

    @property
    def pid(self) -> int | None:
        """The nginx master's process id (also its process group id), or None when stopped."""
        return None if self._proc is None else self._proc.pid

    @property
    def prefix(self) -> Path | None:
        """The private directory holding nginx's config, logs, pid and temp files."""
        return self._prefix

    def error_log(self) -> str:
        """The text of nginx's error log so far (e.g. ``upstream timed out`` after a cut)."""
        if self._prefix is None:
            raise IngressError("ingress not started: its error log exists only while it runs")
        return _read_text(self._prefix / "error.log")

    def _resolve_binary(self) -> str:
        if self._nginx is not None:
            if os.path.isfile(self._nginx) and os.access(self._nginx, os.X_OK):
                return self._nginx
            raise IngressError(f"{_NOT_FOUND} (no executable file at {self._nginx!r})")
        found = shutil.which("nginx")
        if found is not None:
            return found
        for candidate in NGINX_FALLBACK_PATHS:
            if os.access(candidate, os.X_OK):
                return candidate
        raise IngressError(
            f"{_NOT_FOUND} (looked on PATH and in {', '.join(NGINX_FALLBACK_PATHS)})"
        )

    def _launch(self, binary: str, port: int) -> bool:
        """Run nginx on ``port``; False when the port was taken meanwhile (try another)."""
        assert self._prefix is not None
        prefix = self._prefix
        for name in ("error.log", "stderr.log", "nginx.pid"):
            (prefix / name).unlink(missing_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(_render_config(self, prefix, port))
        with open(prefix / "stderr.log", "wb") as stderr:
            try:
                self._proc = subprocess.Popen(
                    [binary, "-p", f"{prefix}/", "-c", str(conf), "-e", str(prefix / "error.log")],
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=stderr,
                    start_new_session=True,
                )
            except OSError as exc:
                raise IngressError(f"could not run nginx at {binary!r}: {exc}") from exc
        proc = self._proc
        Reaper.get().watch_group(proc.pid)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            code = proc.poll()
            log = _read_text(prefix / "error.log")
            if _address_in_use(log, port):
                # nginx retries bind() for ~2.5 s before giving up; a new port is quicker.
                self._terminate()
                return False
            if code is not None:
                self._terminate()
                raise IngressError(
                    f"nginx exited with code {code} while starting; "
                    f"last lines of its logs:\n{self._log_tail()}"
                )
            # nginx writes its pid file only after binding every listen socket.
            if _read_text(prefix / "nginx.pid").strip() == str(proc.pid) and _accepts(port):
                self._port = port
                return True
            if time.monotonic() >= deadline:
                raise IngressError(
                    f"nginx did not accept connections on 127.0.0.1:{port} within "
                    f"{_START_TIMEOUT_S:g} s; last lines of its logs:\n{self._log_tail()}"
                )
            # Waiting on the process doubles as the pause between checks and wakes on exit.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.01)

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        # The whole group: the master and its worker, which would outlive a dead master.
        stop_group(proc, _STOP_TIMEOUT_S)
        Reaper.get().forget_group(proc.pid)

    def _log_tail(self) -> str:
        assert self._prefix is not None
        lines: list[str] = []
        for name in ("error.log", "stderr.log"):
            lines += _read_text(self._prefix / name).splitlines()
        return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(nginx logged nothing)"


def _render_config(ingress: Ingress, prefix: Path, port: int) -> str:
    def path(name: str) -> str:
        return f'"{prefix / name}"'

    if ingress.gzip:
        gzip = (
            "gzip on;\n"
            f"            gzip_types {_GZIP_TYPES};\n"
            "            gzip_min_length 1;\n"
            "            gzip_proxied any;"
        )
    else:
        gzip = "gzip off;"
    return f"""\
# Generated by pytest-streamguard: a production-like ingress hop on loopback.
daemon off;
master_process on;
worker_processes 1;
{_user_directive()}
pid {path("nginx.pid")};
lock_file {path("nginx.lock")};
error_log {path("error.log")} warn;

events {{
    worker_connections 256;
}}

http {{
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path {path("client_body_temp")};
    proxy_temp_path {path("proxy_temp")};
    fastcgi_temp_path {path("fastcgi_temp")};
    uwsgi_temp_path {path("uwsgi_temp")};
    scgi_temp_path {path("scgi_temp")};

    server {{
        listen 127.0.0.1:{port};

        location / {{
            proxy_pass http://{ingress.upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout {_ms(ingress.read_timeout)}ms;
            send_timeout {_ms(ingress.send_timeout)}ms;
            proxy_buffering {"on" if ingress.buffering else "off"};
            {gzip}
        }}
    }}
}}
"""


def _user_directive() -> str:
    if os.geteuid() != 0:
        # Without root nginx cannot switch users and only warns about the directive.
        return "# not root: workers run as the current user"
    try:
        account = pwd.getpwnam("nobody")
    except KeyError:
        return "# no 'nobody' account: workers keep root's identity"
    group = grp.getgrgid(account.pw_gid).gr_name
    return f"user {account.pw_name} {group};"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _address_in_use(log: str, port: int) -> bool:
    return any(
        f"127.0.0.1:{port} failed" in line and "Address already in use" in line
        for line in log.splitlines()
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _check_timeout(name: str, value: object) -> float:
    if not finite(value) or value < _MIN_TIMEOUT_S:
        raise ValueError(
            f"{name} must be a finite number of seconds >= {_MIN_TIMEOUT_S}, got {value!r}"
        )
    return float(value)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _parse_upstream(upstream: object) -> str:
    accepted = "accepted: 'HOST:PORT' or 'http://HOST:PORT', e.g. 'http://127.0.0.1:8000'"
    if not isinstance(upstream, str) or not upstream:
        raise ValueError(f"upstream must be a non-empty string, got {upstream!r}; {accepted}")
    text = upstream if "://" in upstream else f"http://{upstream}"
    parts = urllib.parse.urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        parts.scheme != "http"
        or not parts.hostname
        or port is None
        or not 0 < port < 65536
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
        or any(c.isspace() or c in ";{}\"'$" for c in upstream)
    ):
        raise ValueError(f"upstream {upstream!r} is not a plain HTTP address; {accepted}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


class IngressHop:
    """An :class:`Ingress` put between a proxy and its target for one test, recorded like a
    fault (``record``: its on/off stamps and settings, shown in verdicts and reports).

    :meth:`start` starts nginx in front of ``target`` and points the proxy at it with
    ``repoint(address)``; :meth:`remove` points the proxy back at ``upstream`` and stops nginx."""

    def __init__(
        self,
        target: str,
        repoint: Callable[[str], None],
        *,
        read_timeout: float,
        buffering: bool,
        gzip: bool,
        send_timeout: float,
    ) -> None:
        params: dict[str, Any] = {
            "read_timeout": read_timeout,
            "buffering": buffering,
            "gzip": gzip,
            "send_timeout": send_timeout,
        }
        self.ingress = Ingress(target, **params)
        self.record = FaultRecord(kind="ingress", params=params, toxics=[])
        self._repoint = repoint

    def start(self) -> Self:
        """Start nginx and point the proxy at it (nginx stopped again if that fails)."""
        self.ingress.start()
        # Before the call: re-pointing the proxy closes its open connections while it runs.
        self.record.on_ns = time.perf_counter_ns()
        try:
            self._repoint(self.ingress.address)
        except BaseException:
            self.ingress.stop()
            raise
        return self

    def remove(self, upstream: str) -> None:
        """Point the proxy back at ``upstream``, then stop nginx (also when that fails)."""
        try:
            self._repoint(upstream)
        finally:
            self.ingress.stop()
            self.record.off_ns = time.perf_counter_ns()
