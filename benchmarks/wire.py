"""The plugin's TTFT and gaps against a packet capture of the same streams (issue 28).

tcpdump captures the loopback traffic (``-i lo``, nanosecond stamps with
``--time-stamp-precision=nano``; the stamp type is the one the device offers: on Linux ``lo``
only ``host``, the kernel's receive/transmit stamp) while the plugin's load reads N concurrent
streams (``streamguard.load``'s code, a fresh process per run) from ``openai_server.py`` (first
token 200 ms after the request, then one every 20 ms), direct, through the embedded proxy,
through the real Toxiproxy (``--toxiproxy-server``) and through nginx's ``stream`` module (a C
proxy, one worker, no toxic: the limit to compare the embedded proxy with; Debian's
libnginx-mod-stream, and a ``# --modes nginx: no rows, ...`` line says so when it is absent).
The counts run one after the other, each on every path before the next count, so the paths'
rows of one count share the machine's moment.

From the capture, per TCP connection: **wire TTFT** is the packet that holds the request's last
byte to the first packet that holds a content token (``"content": " baba"``); **wire gaps** are
between the packets that hold consecutive token events (the byte that ends an event, ``\\n\\n``,
dates it; events in one packet share its time). The plugin's trace names its connection
(``trace.local``: the client's local ``address:port``), and the capture's connection with that
client port is the stream's: a stream is matched to its connection by the client's local port,
never by order. Errors are tool minus wire, per stream (TTFT) and per event (gaps, event i of
the trace against event i of the wire).

Through a proxy the plugin's connection is the one to the proxy's port. What the proxy added,
from the same capture: "proxy fwd request" is the client's request on the wire to the proxy's
upstream request on the wire (per stream; it holds the proxy's accept and its dial of the
upstream), "proxy fwd chunk" each token event on the upstream connection to the same event on
the client's connection (per event). The client's connection is paired with its upstream
connection by the server's ``received_ns`` in both responses, an event with its copy by the
``sent_ns`` in it.

The packets the kernel dropped come from tcpdump's own count at exit: a run with any is void
and says so.

``--single``: also one stream read by the plugin's single-stream client
(``streamguard.stream()``'s :func:`~pytest_streamguard.stream.client.read_stream`, a fresh process),
on the same server and capture rules. ``--aiperf PATH`` (default: ``.venv-aiperf/bin/aiperf``
when it exists; ``--aiperf none`` skips it): NVIDIA AIPerf 0.13.0 runs each count direct,
``--request-count N --concurrency N`` with ``--connection-reuse-strategy never`` (one connection
per request) and ``--export-http-trace``: its ``profile_export.jsonl`` record of each request
names the connection's ``local_port`` (matched to the capture like the plugin's streams) and
holds its ``time_to_first_token`` and ``inter_chunk_latency`` (ms, one per token event after
the first), compared event by event with the wire. AIPerf's TTFT starts when it starts the
request, before the connect (its own definition), so its TTFT error holds its connect.

CPU: the client's CPU time (user + system) over the run, per stream and per event (token
events read); the plugin's from its process (and its shard processes), AIPerf's from every
process of the ``aiperf profile`` run (waited children), start-up included: a run of 1 stream
shows the fixed cost, and the difference of two rows the cost per stream.

``python benchmarks/wire.py [--streams 1,10,100,500] [--modes direct,proxy,toxiproxy,nginx]
[--processes auto] [--single]`` (as root: tcpdump needs it); ``--check`` runs 10 direct streams
and one ``stream()`` and exits non-zero unless every request stamp is after its connection's SYN and
within 20 ms of its request on the wire.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    MODEL,
    NGINX_STREAM_MODULE,
    cell,
    chat_body,
    chat_recorders,
    command_line,
    find_aiperf,
    load_line,
    make_proxy,
    nginx_stream_absent,
    start_embedded_proxy,
    start_json,
    start_nginx_stream,
    start_real_toxiproxy,
    stop,
    tokenizer_dir,
)

from pytest_streamguard.verdict.stats import percentile as pct

HERE = Path(__file__).resolve().parent
TOKEN = b'"content": " baba"'
RECEIVED = re.compile(rb'"received_ns": (\d+)')
SENT = re.compile(rb'"sent_ns": (\d+)')
TOKENS = 20
PROCESSES: int | str = 1  # --processes: load processes (streamguard.load's processes=)
SINGLE = False  # --single: one stream() row as well
AIPERF: str | None = None  # --aiperf: AIPerf rows as well


@dataclass
class Connection:
    """One TCP connection as the capture saw it (client port -> server port)."""

    client_port: int
    server_port: int
    syn_ns: int | None = None
    request: list[tuple[int, int]] = field(default_factory=list)  # (time, payload bytes)
    response: bytearray = field(default_factory=bytearray)
    # (end offset in the response stream, packet time) per response packet with payload.
    marks: list[tuple[int, int]] = field(default_factory=list)

    def request_out_ns(self) -> int | None:
        """The packet holding the request's last byte (one request per connection here)."""
        return self.request[-1][0] if self.request else None

    def token_ns(self) -> list[int]:
        """When each content token arrived: the packet that holds the end of its event."""
        return list(self.token_events().values())

    def token_events(self) -> dict[int, int]:
        """Each content token's event by the server's ``sent_ns`` in it (unique per event)
        to the time of the packet that holds the event's end, in stream order."""
        times: dict[int, int] = {}
        start = 0
        data = bytes(self.response)
        while (at := data.find(TOKEN, start)) >= 0:
            end = data.find(b"\n\n", at)
            if end < 0:
                break
            sent = SENT.search(data, at, end)
            times[int(sent.group(1)) if sent else -at] = self._packet_at(end + 1)
            start = end
        return times

    def received_ns(self) -> int | None:
        """The server's stamp of this connection's request (``received_ns`` in its first
        content event): the same bytes on the client's and on the proxy's upstream connection,
        so it pairs the two exactly."""
        found = RECEIVED.search(self.response)
        return None if found is None else int(found.group(1))

    def _packet_at(self, offset: int) -> int:
        for end, stamp in self.marks:
            if offset < end:
                return stamp
        return self.marks[-1][1]


def packets(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(time ns, frame)`` of each packet of a pcap file (micro- or nanosecond)."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    scale = {0xA1B2C3D4: 1000, 0xA1B23C4D: 1}[magic]
    linktype = struct.unpack("<I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit(f"pcap link type {linktype}: expected 1 (Ethernet, as Linux lo gives)")
    offset = 24
    while offset + 16 <= len(data):
        seconds, fraction, caplen, _ = struct.unpack("<IIII", data[offset : offset + 16])
        offset += 16
        yield seconds * 1_000_000_000 + fraction * scale, data[offset : offset + caplen]
        offset += caplen


def connections(path: Path, server_ports: set[int]) -> dict[tuple[int, int], Connection]:
    """The capture's TCP connections to ``server_ports``, keyed ``(client port, server port)``."""
    found: dict[tuple[int, int], Connection] = {}
    for stamp, frame in packets(path):
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        header = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            continue
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[header:total]
        source, dest = struct.unpack("!HH", tcp[:4])
        flags = tcp[13]
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if dest in server_ports:
            key = (source, dest)
            if flags & 0x02 and not flags & 0x10:  # SYN: a new connection on this port
                found[key] = Connection(source, dest, syn_ns=stamp)
            elif payload and key in found:
                found[key].request.append((stamp, len(payload)))
        elif source in server_ports and payload and (dest, source) in found:
            conn = found[(dest, source)]
            conn.response += payload
            conn.marks.append((len(conn.response), stamp))
    return found


def forwarding(
    found: dict[tuple[int, int], Connection], proxy: int, server_port: int
) -> tuple[list[float], list[float]]:
    """What the proxy added, ms: per stream, the client's request on the wire to the proxy's
    upstream request on the wire, and per token event, the event on the upstream connection
    to the same event on the client's connection. Each client connection is paired with its
    upstream connection by the server's ``received_ns`` in both responses, each event with
    its copy by the server's ``sent_ns`` in it (so an event one capture lacks shifts none)."""
    upstream = {
        stamp: conn
        for key, conn in found.items()
        if key[1] == server_port and (stamp := conn.received_ns()) is not None
    }
    requests: list[float] = []
    chunks: list[float] = []
    for key, client in found.items():
        stamp = client.received_ns()
        if key[1] != proxy or stamp is None or stamp not in upstream:
            continue
        server = upstream[stamp]
        client_out, server_out = client.request_out_ns(), server.request_out_ns()
        if client_out is not None and server_out is not None:
            requests.append((server_out - client_out) / 1e6)
        into = server.token_events()
        chunks += [
            (out - into[sent]) / 1e6 for sent, out in client.token_events().items() if sent in into
        ]
    return requests, chunks


class Capture:
    """tcpdump on lo for the ports given, as a context manager; ``dropped`` after exit."""

    def __init__(self, ports: list[int], directory: str) -> None:
        self.path = Path(directory, "wire.pcap")
        self.ports = ports
        self.dropped: int | None = None

    def __enter__(self) -> Capture:
        tcpdump = shutil.which("tcpdump") or "/usr/bin/tcpdump"
        filt = " or ".join(f"tcp port {p}" for p in self.ports)
        # --immediate-mode: each packet reaches tcpdump as it is captured; without it the
        # kernel hands packets over in blocks (up to a timeout), and those still held when the
        # capture is stopped were lost (a 10-stream run once matched no token).
        argv = [tcpdump, "-i", "lo", "-n", "-U", "--immediate-mode", "-B", "65536", "-s", "4096"]
        argv += ["--time-stamp-precision=nano", "-w", str(self.path), filt]
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        if "listening" not in line:
            raise SystemExit(f"tcpdump did not start: {line.strip()} (root is needed)")
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)  # the last packets' way through the capture buffer; not a sync point
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=30)
        for line in err.splitlines():
            if "dropped by kernel" in line:
                self.dropped = int(line.split()[0])


def child(url: str, streams: int, processes: int | str, single: bool = False) -> None:
    """The load's side (a fresh process): N concurrent streams, their stamps as JSON. With
    ``single``, one stream read by the single-stream client (``stream()``'s) instead."""
    from pytest_streamguard.load import LoadPlan, LoadResult
    from pytest_streamguard.load import run as run_load
    from pytest_streamguard.load.pool import resolve_processes
    from pytest_streamguard.stream.client import read_stream

    make = chat_recorders(url, chat_body(TOKENS))

    count = None if single else resolve_processes(processes, streams)
    sharded = count is not None and count > 1
    cpu = time.process_time()
    if single:
        result = LoadResult(LoadPlan(n=1), [read_stream(make(0))])
    elif sharded:
        from pytest_streamguard.load import run_private
        from pytest_streamguard.load.pool import arun_processes

        assert count is not None
        request = make(0).request
        result = run_private(lambda: arun_processes(LoadPlan(n=streams), request, count))
        # The shards' CPU, with this process's own.
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu -= children.ru_utime + children.ru_stime
    else:
        result = run_load(LoadPlan(n=streams), make)
    cpu = time.process_time() - cpu
    if sharded:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += children.ru_utime + children.ru_stime
    # perf_counter (CLOCK_MONOTONIC) to the capture's clock (CLOCK_REALTIME), for --check.
    before = time.perf_counter_ns()
    wall = time.time_ns()
    offset = wall - (before + time.perf_counter_ns()) // 2
    traces = [
        {
            "local": t.local,
            "request_ns": t.request_ns,
            "queued_ns": t.queued_ns,
            "stamps": t.stamps,
            "chunks": [c.stamp_ns for c in t.chunks],
            "read_delay_ns": t.read_delay_ns,
            "completed": t.completed,
        }
        for t in result.traces
    ]
    shards = count if sharded else 1
    print(json.dumps({"offset_ns": offset, "cpu_s": cpu, "traces": traces, "processes": shards}))


def run(
    mode: str, streams: int, server_port: int, proxy: int | None, single: bool = False
) -> dict[str, Any]:
    """One load (or, ``single``, one stream()) under capture; the errors against the wire."""
    port = proxy if proxy is not None else server_port
    url = f"http://127.0.0.1:{port}"
    ports = sorted({server_port, port})
    load_avg = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="wire-") as directory:
        with Capture(ports, directory) as capture:
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", url, str(streams)]
            argv += ["--processes", str(PROCESSES)] + (["--single"] if single else [])
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"load failed: {done.stderr[-2000:]}")
        figures = json.loads(done.stdout.splitlines()[-1])
        found = connections(capture.path, set(ports))
    ttft_err, gap_err, write, read, after_syn, after_out = [], [], [], [], [], []
    matched = 0
    for trace in figures["traces"]:
        if not trace["local"]:
            continue
        conn = found.get((int(trace["local"].rsplit(":", 1)[1]), port))
        out = None if conn is None else conn.request_out_ns()
        tokens = [] if conn is None else conn.token_ns()
        if conn is None or out is None or not trace["chunks"] or not tokens:
            why = "no connection" if conn is None else "no request" if out is None else "no tokens"
            print(f"unmatched {trace['local']}: {why}", file=sys.stderr)
            continue
        matched += 1
        # The capture may end a packet short of the load (tcpdump stops after it): events
        # are compared as far as both have them.
        chunks = trace["chunks"][: len(tokens)]
        tokens = tokens[: len(chunks)]
        ttft_err.append(((chunks[0] - trace["request_ns"]) - (tokens[0] - out)) / 1e6)
        for i in range(1, len(chunks)):
            gap_err.append(((chunks[i] - chunks[i - 1]) - (tokens[i] - tokens[i - 1])) / 1e6)
        if trace["queued_ns"] is not None:
            write.append((trace["request_ns"] - trace["queued_ns"]) / 1e6)
        read += [d / 1e6 for d in trace["read_delay_ns"]]
        stamp_wall = trace["request_ns"] + figures["offset_ns"]
        if conn.syn_ns is not None:
            after_syn.append((stamp_wall - conn.syn_ns) / 1e6)
        after_out.append((stamp_wall - out) / 1e6)
    forwarded: tuple[list[float], list[float]] = ([], [])
    if proxy is not None:
        forwarded = forwarding(found, proxy, server_port)
    stamps = {t["stamps"] for t in figures["traces"]}
    shards = int(figures.get("processes", 1))
    if single:
        tool = "streamguard stream()"
    else:
        auto = " (auto)" if PROCESSES == "auto" else ""
        tool = "streamguard load" + (f" x{shards}" if shards > 1 else "") + auto
    events = sum(len(t["chunks"]) for t in figures["traces"])
    return {
        "cpu_us_per_event": figures["cpu_s"] * 1e6 / max(events, 1),
        "tool": tool,
        "mode": mode,
        "streams": streams,
        "matched": matched,
        "dropped": capture.dropped,
        "load": load_avg,
        "stamps": ",".join(sorted(str(s) for s in stamps)),
        "ttft_err": ttft_err,
        "gap_err": gap_err,
        "write": write,
        "read": read,
        "after_syn": after_syn,
        "after_out": after_out,
        "forwarding": forwarded[0],
        "chunk_forwarding": forwarded[1],
        "cpu_ms_per_stream": figures["cpu_s"] * 1e3 / max(streams, 1),
    }


def run_aiperf(streams: int, server_port: int) -> dict[str, Any]:
    """AIPerf 0.13.0 sends ``streams`` requests at once (one connection each) under capture;
    its TTFT and inter-chunk latencies against the wire, per request matched by local port."""
    assert AIPERF is not None
    url = f"http://127.0.0.1:{server_port}"
    load_avg = os.getloadavg()[0]
    tokenizer = tokenizer_dir()
    with tempfile.TemporaryDirectory(prefix="wire-aiperf-") as directory:
        artifacts = Path(directory, "artifacts")
        argv = [
            AIPERF, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat",
            "--streaming", "--tokenizer", tokenizer, "--concurrency", str(streams),
            "--request-count", str(streams), "--osl", str(TOKENS), "--isl", "16",
            "--connection-reuse-strategy", "never", "--ui-type", "none", "--random-seed", "1",
            "--artifact-dir", str(artifacts), "--export-http-trace",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
        with Capture([server_port], directory) as capture:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=directory, check=False
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        export = artifacts / "profile_export.jsonl"
        if done.returncode != 0 or not export.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise SystemExit(f"aiperf failed (exit {done.returncode}):\n{tail}")
        records = [json.loads(line) for line in export.read_text().splitlines() if line.strip()]
        found = connections(capture.path, {server_port})
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    ttft_err, gap_err, write, after_syn, after_out = [], [], [], [], []
    matched = events = 0
    for record in records:
        trace = record.get("trace_data") or {}
        metrics = record.get("metrics") or {}
        conn = found.get((trace.get("local_port") or 0, server_port))
        out = None if conn is None else conn.request_out_ns()
        ttft = (metrics.get("time_to_first_token") or {}).get("value")
        if conn is None or out is None or ttft is None:
            continue
        tokens = conn.token_ns()
        if not tokens:
            continue
        matched += 1
        chunk_gaps = list((metrics.get("inter_chunk_latency") or {}).get("value") or [])
        events += 1 + len(chunk_gaps)
        ttft_err.append(ttft - (tokens[0] - out) / 1e6)
        wire_gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(tokens)]
        gap_err += [g - w for g, w in zip(chunk_gaps, wire_gaps, strict=False)]
        sent = trace.get("request_send_end_ns")
        start = (record.get("metadata") or {}).get("request_start_ns")
        if sent is not None:
            after_out.append((sent - out) / 1e6)
            if conn.syn_ns is not None:
                after_syn.append((sent - conn.syn_ns) / 1e6)
            if start is not None:
                write.append((sent - start) / 1e6)
    return {
        "tool": "AIPerf 0.13.0 (reuse never)",
        "mode": "direct",
        "streams": streams,
        "matched": matched,
        "dropped": capture.dropped,
        "load": load_avg,
        "stamps": "aiohttp",
        "ttft_err": ttft_err,
        "gap_err": gap_err,
        "write": write,
        "read": [],
        "after_syn": after_syn,
        "after_out": after_out,
        "forwarding": [],
        "chunk_forwarding": [],
        "cpu_ms_per_stream": cpu * 1e3 / max(streams, 1),
        "cpu_us_per_event": cpu * 1e6 / max(events, 1),
    }


def event_cpu(row: dict[str, Any]) -> str:
    """The row's CPU per token event read (us), or ``-`` for a row without it."""
    value = row.get("cpu_us_per_event")
    return "-" if value is None else f"{value:.0f}"


def signed(value: float | None) -> str:
    """A ms error for the table, with its sign."""
    return cell(value, signed=True)


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of the runs."""
    lines = [
        "| tool | path | streams | matched | TTFT err p50/p99/max ms | gap err p50/p99/max ms "
        "| client write p99 ms | client read p99 ms | proxy fwd request p50/p99 ms "
        "| proxy fwd chunk p50/p99/max ms | dropped | load | CPU ms/stream | CPU us/event "
        "| stamps |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: "
        "| ---: | --- |",
    ]
    for r in rows:

        def three(values: list[float]) -> str:
            top = max(values, key=abs) if values else None
            return f"{signed(pct(values, 50))} / {signed(pct(values, 99))} / {signed(top)}"

        fwd = "-" if not r["forwarding"] else (
            f"{signed(pct(r['forwarding'], 50))} / {signed(pct(r['forwarding'], 99))}"
        )  # fmt: skip
        chunk_fwd = three(r["chunk_forwarding"]) if r["chunk_forwarding"] else "-"
        dropped = r["dropped"]
        void = "" if dropped == 0 else " VOID: the kernel dropped packets"
        lines.append(
            f"| {r['tool']} | {r['mode']} | {r['streams']} | {r['matched']} | "
            f"{three(r['ttft_err'])} | {three(r['gap_err'])} | {signed(pct(r['write'], 99))} | "
            f"{signed(pct(r['read'], 99))} | {fwd} | {chunk_fwd} | {dropped}{void} | "
            f"{r['load']:.2f} | "
            f"{r['cpu_ms_per_stream']:.2f} | {event_cpu(r)} | {r['stamps']} |"
        )
    return lines


MODES = ("direct", "proxy", "toxiproxy", "nginx")
"""``--modes``: no proxy, the embedded one, the real Toxiproxy, nginx's ``stream`` (a C proxy)."""
NOTES: list[str] = []  # why a mode asked for has no rows (printed under the table)
NGINX_MODULE = NGINX_STREAM_MODULE  # --nginx-stream-module


def measure(counts: list[int], modes: list[str], toxiproxy: str | None) -> list[dict[str, Any]]:
    """Every (mode, count) run against one server (and proxy)."""
    server, ready = start_json([sys.executable, str(HERE / "openai_server.py"), "--tokens", "20"])
    helpers: list[subprocess.Popen[Any]] = [server]
    groups: list[subprocess.Popen[Any]] = []
    prefixes: list[tempfile.TemporaryDirectory[str]] = []
    rows = []
    try:
        server_port = int(ready["url"].rsplit(":", 1)[1])
        proxies: dict[str, int | None] = {"direct": None}
        if "proxy" in modes:
            embedded, api_port = start_embedded_proxy()
            helpers.append(embedded)
            proxies["proxy"] = make_proxy(f"http://127.0.0.1:{api_port}", server_port, "wire")
        if "toxiproxy" in modes and toxiproxy:
            real, real_api = start_real_toxiproxy(toxiproxy)
            helpers.append(real)
            proxies["toxiproxy"] = make_proxy(real_api, server_port, "wire_real")
        elif "toxiproxy" in modes:
            absent("toxiproxy", "no --toxiproxy-server (or STREAMGUARD_TOXIPROXY_SERVER) given")
        if "nginx" in modes:
            why = nginx_stream_absent(NGINX_MODULE)
            if why is None:
                nginx, proxies["nginx"], prefix = start_nginx_stream(server_port, NGINX_MODULE)
                groups.append(nginx)
                prefixes.append(prefix)
            else:
                absent("nginx", why)
        # Interleaved: each count runs on every path before the next count, so a path's rows
        # and the C proxy's share the machine's moment (its load swings minute to minute).
        for count in counts:
            for mode in modes:
                if mode not in proxies:
                    continue
                rows.append(run(mode, count, server_port, proxies[mode]))
                print("\n".join(table(rows[-1:])[2:]), file=sys.stderr, flush=True)
        if SINGLE and "direct" in modes:
            rows.append(run("direct", 1, server_port, None, single=True))
            print("\n".join(table(rows[-1:])[2:]), file=sys.stderr, flush=True)
        if AIPERF is not None and "direct" in modes:
            for count in counts:
                rows.append(run_aiperf(count, server_port))
                print("\n".join(table(rows[-1:])[2:]), file=sys.stderr, flush=True)
    finally:
        for helper in helpers:
            stop(helper)
        for group in groups:
            stop(group, group=True)
        for prefix in prefixes:
            prefix.cleanup()
    return rows


def absent(mode: str, why: str) -> None:
    """Say, now and under the table, that ``mode`` has no rows and why."""
    note = f"# --modes {mode}: no rows, {why}"
    NOTES.append(note)
    print(note, file=sys.stderr, flush=True)


def check() -> int:
    """10 direct streams of a load and one ``stream()``: every request stamp after its SYN and
    within 20 ms of the request's last byte on the wire (a stamp taken before the connect
    fails the first), each stream matched to its connection by its local port (a client that
    does not name its connection fails that)."""
    global SINGLE
    SINGLE = True
    problems = []
    rows = measure([10], ["direct"], None)
    for row, expected in zip(rows, (10, 1), strict=True):
        tool = row["tool"]
        if row["dropped"] != 0:
            problems.append(f"the kernel dropped {row['dropped']} packets: the check is void")
        if row["matched"] != expected:
            problems.append(
                f"{tool}: {row['matched']} of {expected} streams matched to a connection by "
                "local port"
            )
        if not row["after_syn"] or min(row["after_syn"]) <= 0:
            problems.append(f"{tool}: request stamps before the SYN (ms after): {row['after_syn']}")
        # 20 ms: the kernel's transmit stamp is within microseconds of the capture's, the
        # fallback (when the write returned) within a preemption of it; a stamp at the response
        # headers (200 ms on) or later fails.
        if not row["after_out"] or max(abs(v) for v in row["after_out"]) > 20.0:
            problems.append(
                f"{tool}: request stamp to request on the wire (ms): {row['after_out']}"
            )
        keys = ("tool", "matched", "dropped", "stamps", "after_syn", "after_out")
        print(json.dumps({k: row[k] for k in keys}))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    """Run the captures and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="1,10,100,500")
    parser.add_argument(
        "--modes",
        default="direct,proxy,toxiproxy,nginx",
        help=f"comma-separated, of {', '.join(MODES)} (nginx: its stream module, a C proxy)",
    )
    parser.add_argument(
        "--nginx-stream-module",
        default=NGINX_STREAM_MODULE,
        help="nginx's stream module (Debian's libnginx-mod-stream installs it there)",
    )
    parser.add_argument(
        "--toxiproxy-server", default=os.environ.get("STREAMGUARD_TOXIPROXY_SERVER")
    )
    parser.add_argument("--check", action="store_true", help="the small check make test runs")
    parser.add_argument(
        "--processes", default="1", help="load processes (shards): a count, or auto"
    )
    parser.add_argument("--single", action="store_true", help="one stream() row as well")
    parser.add_argument(
        "--aiperf", help="aiperf executable (default .venv-aiperf/bin/aiperf if there; none: skip)"
    )
    parser.add_argument("--child", nargs=2, metavar=("URL", "STREAMS"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    global PROCESSES, NGINX_MODULE
    global SINGLE, AIPERF
    NGINX_MODULE = options.nginx_stream_module
    modes = options.modes.split(",")
    if unknown := [mode for mode in modes if mode not in MODES]:
        parser.error(
            f"--modes {options.modes}: unknown {', '.join(unknown)}; use {', '.join(MODES)}"
        )
    PROCESSES = options.processes if options.processes == "auto" else int(options.processes)
    SINGLE = options.single
    if options.child:
        child(options.child[0], int(options.child[1]), PROCESSES, SINGLE)
        return 0
    if options.check:
        return check()
    AIPERF = find_aiperf(options.aiperf, anywhere=False)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = os.getloadavg()
    rows = measure([int(n) for n in options.streams.split(",")], modes, options.toxiproxy_server)
    print(f"# {started}; {os.cpu_count()} cores; {load_line(before[0])}")
    print(command_line("wire.py"))
    print("# error = tool minus wire; streams matched to connections by client local port")
    print("\n".join(table(rows)))
    print("\n".join(NOTES))
    if any(r["dropped"] != 0 for r in rows):
        print("# VOID rows: the kernel dropped packets during their capture")
    return 0


if __name__ == "__main__":
    sys.exit(main())
