"""What the benchmark scripts share, written once: percentiles, process readers, helper
processes, the lean servers' plumbing, the OpenAI request, AIPerf discovery and table cells.

The scripts in this folder import it as a top-level module (``import common``), as they import
each other. In it:

- **Percentiles.** The nearest-rank percentile is the plugin's own
  (:func:`pytest_streamguard.verdict.stats.percentile`, q in 0..100; ``run.py``, ``fidelity.py``,
  ``wire.py``). Two older tables keep their own methods, so their figures stay comparable with
  the runs recorded in benchmarks/RESULTS.md: :func:`index_percentile` (q in 0..1, the sample at
  index ``round(q * (n - 1))``; ``proxy_overhead.py``, ``toxiproxy_compare.py``) and
  :func:`rounded_rank_percentile` (``target_load.py``, ``target_slow_readers.py``).
- **Process readers** (Linux ``/proc``): :func:`rss_kib`, :func:`rss_mib`, :func:`cpu_s`,
  :func:`descendants`, :func:`cmdline`, :func:`alive` and :class:`RssSampler`.
- **Helper processes**: :func:`start_json` (a script that prints one JSON line when it
  listens), :func:`start_embedded_proxy`, :func:`start_real_toxiproxy`,
  :func:`start_nginx_stream` (a C proxy: nginx's ``stream`` module) and
  :func:`nginx_stream_absent`, :func:`start_target`
  (the bundled target, once ready), :func:`make_proxy` and :func:`stop`.
- **Lean servers**: :class:`Streamer` and :class:`PacedStreamer` (an asyncio protocol that
  streams to one connection), :func:`serve_until_signal` and :func:`run_loop` (uvloop when
  installed).
- **The OpenAI request** of ``openai_server.py``: :func:`chat_body` and :func:`chat_recorders`.
- **AIPerf**: :func:`find_aiperf` and :func:`tokenizer_dir`.
- **Table lines**: :func:`cell`, :func:`machine`, :func:`load_line` and :func:`command_line`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import httpx

if TYPE_CHECKING:
    from pytest_streamguard.stream.client import StreamRecorder

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
T = TypeVar("T")
START_TIMEOUT_S = 20.0
TARGET_READY_S = 180.0


# -- percentiles


def index_percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (q in 0..1): the sorted sample at index ``round(q * (n - 1))``.

    Not nearest-rank: ``proxy_overhead.py``'s method, kept so its tables stay comparable."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def rounded_rank_percentile(values: Sequence[float], q: float) -> float:
    """The sample at rank ``round(q / 100 * n + 0.5)`` (q in 0..100); NaN for no values.

    Nearest-rank except where ``q / 100 * n`` is an odd whole number (Python rounds half to
    even, so the rank is one higher there): ``target_load.py``'s method, kept so its tables
    stay comparable."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


# -- process readers (Linux /proc)


def rss_kib(pid: int) -> int | None:
    """Resident set size of ``pid`` in KiB (``VmRSS``), or None where there is none (a zombie)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB; 0.0 where there is none."""
    return (rss_kib(pid) or 0) / 1024


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in task.read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def cmdline(pid: int) -> str:
    """The command line of ``pid``, or '' once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether ``pid`` still exists."""
    return Path(f"/proc/{pid}").exists()


class RssSampler:
    """Peak summed RSS (MiB) of this process's descendants whose command line has ``marker``,
    sampled every 0.2 s in a thread while the ``with`` block runs."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.peak = 0.0
        self.processes = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stopping.wait(0.2):
            pids = [pid for pid in descendants(os.getpid()) if self.marker in cmdline(pid)]
            total = sum(rss_mib(pid) for pid in pids if alive(pid))
            if total > self.peak:
                self.peak, self.processes = total, len(pids)


# -- helper processes


def start_json(
    argv: list[str], *, new_session: bool = True
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """A helper process that prints one JSON line once it listens; the process and that line.

    ``new_session``: in a process group of its own (stop it with ``stop(process, group=True)``,
    or freeze it alone)."""
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, start_new_session=new_session
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait()
        raise SystemExit(f"{' '.join(argv)} exited with {process.returncode} before listening")
    return process, json.loads(line)


def start_embedded_proxy() -> tuple[subprocess.Popen[str], int]:
    """``python -m pytest_streamguard.toxiproxy_server -port 0`` in a process group of its own,
    and its API port."""
    argv = [sys.executable, "-m", "pytest_streamguard.toxiproxy_server", "-port", "0"]
    process, ready = start_json(argv)
    return process, int(ready["port"])


def start_real_toxiproxy(path: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real toxiproxy-server on a free loopback port; its API URL once it answers.

    The real server's API has no port-0 report, so a free port is picked by binding port 0 and
    closing it; a lost race shows as a server that never answers (the benchmark fails)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [path, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/version", timeout=1).status_code == 200:
                return process, url
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{path} did not answer on {url} within {START_TIMEOUT_S:g} s")
        time.sleep(0.05)


NGINX_STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"
NGINX_STREAM_MISSING = (
    "the C proxy (nginx's stream module) is absent: install Debian's libnginx-mod-stream "
    "(apt-get install libnginx-mod-stream, the same version as nginx-light) or pass "
    "--nginx-stream-module PATH"
)


def nginx_stream_absent(module: str = NGINX_STREAM_MODULE) -> str | None:
    """Why nginx's ``stream`` proxy cannot run here, or None when it can."""
    if shutil.which("nginx") is None and not os.access("/usr/sbin/nginx", os.X_OK):
        return "nginx is absent: install Debian's nginx-light and libnginx-mod-stream"
    if not os.path.isfile(module):
        return f"{NGINX_STREAM_MISSING} (no file at {module})"
    return None


def start_nginx_stream(
    upstream_port: int, module: str = NGINX_STREAM_MODULE, workers: int = 1
) -> tuple[subprocess.Popen[bytes], int, tempfile.TemporaryDirectory[str]]:
    """nginx's ``stream`` module as a plain TCP proxy (a C proxy: no toxic, one worker by
    default, like the embedded proxy's one process) from a free loopback port to
    ``upstream_port``; the process (its own group: stop it with ``stop(p, group=True)``), its
    listen port and its prefix directory (remove it after the stop).

    The port is picked by binding port 0 and closing it (nginx takes no port 0 it could
    report); a lost race shows as nginx exiting on start (the benchmark fails)."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    prefix = tempfile.TemporaryDirectory(prefix="bench-nginx-stream-")
    root = Path(prefix.name)
    root.chmod(0o711)
    user = "user nobody nogroup;" if os.geteuid() == 0 else ""
    conf = root / "nginx.conf"
    conf.write_text(
        f"""load_module {module};
daemon off;
master_process on;
worker_processes {workers};
{user}
pid {root / "nginx.pid"};
error_log {root / "error.log"} warn;
events {{ worker_connections 8192; }}
stream {{
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        proxy_pass 127.0.0.1:{upstream_port};
        proxy_buffer_size 32k;
        tcp_nodelay on;
    }}
}}
"""
    )
    process = subprocess.Popen(
        [binary, "-p", f"{root}/", "-c", str(conf), "-e", str(root / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (root / "nginx.pid").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            log = (root / "error.log").read_text() if (root / "error.log").exists() else ""
            stop(process, group=True)
            prefix.cleanup()
            raise SystemExit(f"nginx (stream) did not start on 127.0.0.1:{port}: {log[-500:]}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.01)
    return process, port, prefix


def start_target(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """``python -m target_app`` on a free port with ``args``; it and its URL once ready."""
    command = [sys.executable, "-m", "target_app", "--port", "0", "--heartbeat", "0", *args]
    process, ready = start_json(command, new_session=False)
    url = str(ready["url"])
    deadline = time.monotonic() + TARGET_READY_S
    with httpx.Client(base_url=url, timeout=5) as client:
        while client.get("/readyz").status_code != 200:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit(f"target {args} never became ready")
            time.sleep(0.1)
    return process, url


def make_proxy(api: str, upstream_port: int, name: str = "bench") -> int:
    """A proxy named ``name`` with no toxic to a loopback upstream, on the Toxiproxy API at
    ``api`` (a URL); its listen port."""
    body = {"name": name, "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream_port}"}
    response = httpx.post(api + "/proxies", json=body, timeout=10)
    response.raise_for_status()
    return int(response.json()["listen"].rsplit(":", 1)[1])


def stop(process: subprocess.Popen[Any], *, group: bool = False, timeout_s: float = 10) -> None:
    """SIGTERM a process this script started (``group``: its whole process group) and wait;
    SIGKILL it if it is still there after ``timeout_s``."""

    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)

    send(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()


# -- lean servers


class Streamer(asyncio.Protocol):
    """One connection of a lean server: the transport, the bytes read so far and the task
    that writes the answer (cancelled when the client goes away)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        """The client went away: stop writing."""
        if self.task is not None:
            self.task.cancel()


class PacedStreamer(Streamer):
    """A :class:`Streamer` that writes as fast as its reader takes the bytes: ``writable`` is
    clear while the transport's buffer is full."""

    def __init__(self) -> None:
        super().__init__()
        self.writable = asyncio.Event()
        self.writable.set()

    def pause_writing(self) -> None:
        """The reader is behind: stop writing."""
        self.writable.clear()

    def resume_writing(self) -> None:
        """The reader caught up."""
        self.writable.set()


async def serve_until_signal(factory: Callable[[], asyncio.Protocol], backlog: int) -> None:
    """Listen on 127.0.0.1:0, print ``{"url": ...}``, serve until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", 0, backlog=backlog)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"url": f"http://127.0.0.1:{port}"}), flush=True)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    server.close()


def run_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when installed, as the embedded server and the load client do."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


# -- the OpenAI request of openai_server.py

MODEL = "reference"


def chat_body(tokens: int, content: str | None = "baba") -> dict[str, Any]:
    """A streaming chat-completions body for ``openai_server.py`` (no message with ``content``
    None)."""
    messages = [] if content is None else [{"role": "user", "content": content}]
    return {
        "model": MODEL,
        "messages": messages,
        "stream": True,
        "max_completion_tokens": tokens,
    }


def chat_recorders(url: str, body: dict[str, Any]) -> Callable[[int], StreamRecorder]:
    """The load's stream factory: stream ``index`` posts ``body`` to ``url``'s chat
    completions, read as ``format="openai"``."""
    from pytest_streamguard.stream.client import StreamRecorder
    from pytest_streamguard.stream.request import StreamRequest

    def make(index: int) -> StreamRecorder:
        request = StreamRequest(
            "POST", url + "/v1/chat/completions", json_body=body, format="openai"
        )
        return StreamRecorder(request, f"stream {index}")

    return make


# -- AIPerf


def find_aiperf(given: str | None, *, anywhere: bool) -> str | None:
    """The aiperf executable to use, or None.

    ``given`` (``--aiperf``): a path, or ``none`` to skip AIPerf; a path that is not a file is
    an error, and a relative one is made absolute (AIPerf runs in a temporary directory).
    Without it: ``.venv-aiperf/bin/aiperf`` (``make bench`` creates it) where it exists, and
    with ``anywhere`` first ``$STREAMGUARD_AIPERF`` and last ``aiperf`` on PATH."""
    if given is not None:
        if given == "none":
            return None
        if not Path(given).is_file():
            raise SystemExit(f"--aiperf {given!r}: no such file; expected an aiperf path or none")
        return str(Path(given).absolute())
    candidates = [os.environ.get("STREAMGUARD_AIPERF")] if anywhere else []
    for candidate in (*candidates, str(ROOT / ".venv-aiperf" / "bin" / "aiperf")):
        if candidate and Path(candidate).is_file():
            return str(Path(candidate).absolute())
    return shutil.which("aiperf") if anywhere else None


def tokenizer_dir() -> str:
    """The bundled target's tiny model directory: AIPerf's tokenizer, offline (it encodes
    " baba" as one token)."""
    sys.path.insert(0, str(ROOT))
    from target_app.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


# -- table lines


def cell(value: float | None, *, signed: bool = False) -> str:
    """A figure in ms to three places (``signed``: with its sign), or '-' for none."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def machine() -> str:
    """CPU count and model, from /proc/cpuinfo where there is one."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPU cores ({model}), no GPU"


def load_line(before: float) -> str:
    """``load average 1.23 before, 2.34 after``: the 1-minute load average now and before."""
    return f"load average {before:.2f} before, {os.getloadavg()[0]:.2f} after"


def command_line(script: str) -> str:
    """``# command: python benchmarks/<script> <this run's arguments>``."""
    return f"# command: {' '.join(['python', f'benchmarks/{script}', *sys.argv[1:]])}"
