"""Fidelity against a peer benchmark: NVIDIA AIPerf and ``streamguard``'s load measure the same
server with known timing, alternating, and each is compared with the truth.

The server is ``openai_server.py`` (OpenAI chat completions, first token 200 ms after the
request is in, then one every 20 ms, 20 tokens, keep-alive HTTP/1.1). At each concurrency (10,
100 and 500 streams by default) AIPerf (``aiperf profile``, streaming chat, its own virtual
environment) and the plugin's load (:mod:`pytest_streamguard.load`, ``format="openai"``, the code
``streamguard.load`` runs) each run as a fresh process, so every plugin figure includes its
session's first load; rounds alternate which goes first. Both run the same closed loop: each of
N workers sends its next request when its stream ends, for the same duration (AIPerf's
``--benchmark-duration``, the plugin's ``LoadPlan(n, duration=)``), and the streams in flight
finish. Like with like: the plugin opens a
connection per stream, so AIPerf runs with ``--connection-reuse-strategy never`` (its TTFT
includes the TCP connect, as the plugin's does).

Per tool: TTFT p50/p99 (AIPerf's from its ``profile_export_aiperf.json``) and the inter-token
gap p50 (AIPerf's ``inter_token_latency`` p50, the plugin's pooled gaps), with their errors
against the known 200 ms and 20 ms. The plugin's rows also say where its milliseconds go: its
request stamp to the server's receipt (``x-received-ns``: client set-up, TCP connect, request
write), the server's own lateness (receipt to the first ``sent_ns``) and delivery (``sent_ns``
to the client's stamp). A ``first stream`` row reads ``load(n=1)`` four times in each of several
fresh processes: the session's first stream against the later ones.

``--probe`` also runs the plugin's load with its probe on (:mod:`pytest_streamguard.stream.probe`:
``GET /v1/models`` every 50 ms beside the streams, the default ``--streamguard-probe`` sends the
target's ready path the same way) in a fresh process of its own each round, alternating with the
load without it, and says per count how far the median TTFT p50 moved (goal: at most 1 ms at
100 streams). ``--aiperf none --streams 100 --rounds 6 --probe`` measures only that.

AIPerf runs offline with the bundled target's tiny tokenizer (a local directory). Its path:
``--aiperf PATH`` (``--aiperf none`` skips it), else ``$STREAMGUARD_AIPERF``, else
``.venv-aiperf/bin/aiperf`` (``make bench`` creates it), else ``aiperf`` on PATH; without one
the AIPerf rows are skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import MODEL, chat_body, chat_recorders, find_aiperf, start_json, stop, tokenizer_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIRST_TOKEN_MS = 200.0
INTERVAL_MS = 20.0
TOKENS = 20


def duration_for(streams: int) -> float:
    """Seconds of closed loop per run: enough streams for a p99 (about 100 at 10 streams)."""
    return 5.0 if streams < 100 else 2.5


def run_aiperf(
    aiperf: str, url: str, streams: int, duration: float, reuse: str, tokenizer: str
) -> dict[str, Any]:
    """One ``aiperf profile`` run; its TTFT and ITL percentiles in ms."""
    with tempfile.TemporaryDirectory(prefix="aiperf-") as artifacts:
        argv = [
            aiperf, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat",
            "--streaming", "--tokenizer", tokenizer, "--concurrency", str(streams),
            "--benchmark-duration", f"{duration:g}", "--benchmark-grace-period", "30",
            "--osl", str(TOKENS), "--isl", "16",
            "--connection-reuse-strategy", reuse, "--ui-type", "none", "--random-seed", "1",
            "--artifact-dir", artifacts,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=artifacts)
        export = Path(artifacts, "profile_export_aiperf.json")
        if done.returncode != 0 or not export.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(f"aiperf failed (exit {done.returncode}):\n{tail}")
        figures = json.loads(export.read_text())
    ttft, itl = figures["time_to_first_token"], figures["inter_token_latency"]
    return {
        "tool": f"AIPerf (reuse {reuse})",
        "streams": streams,
        "requests": int(figures["request_count"]["avg"]),
        "ttft_p50": ttft["p50"],
        "ttft_p99": ttft["p99"],
        "gap_p50": itl["p50"],
        "note": "",
    }


PLUGIN = "streamguard load"
PROBED = "streamguard load + probe"
# What the probe asks for: the lean OpenAI server's one GET.
PROBE_PATH = "/v1/models"


def run_plugin(url: str, streams: int, duration: float, probe: bool = False) -> dict[str, Any]:
    """One load in a fresh process (``--plugin-load``, with ``--with-probe``); its figures in
    ms."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--plugin-load", url]
    argv += [str(streams), f"{duration:g}", *(["--with-probe"] if probe else [])]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"plugin load failed: {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def plugin_load(url: str, streams: int, duration: float, probe: bool = False) -> dict[str, Any]:
    """The child's side: a closed loop of ``streams`` workers for ``duration`` seconds (with the
    probe beside them when ``probe``)."""
    from pytest_streamguard.load import LoadPlan
    from pytest_streamguard.load import run as run_load
    from pytest_streamguard.stream.probe import ProbeSpec
    from pytest_streamguard.verdict.stats import percentile

    plan = LoadPlan(n=streams, duration=duration)
    spec = ProbeSpec.for_target(PROBE_PATH, url, PROBE_PATH, 0.05) if probe else None
    result = run_load(plan, chat_recorders(url, chat_body(TOKENS)), probe=spec)

    def ms(values: list[float], q: float) -> float | None:
        value = percentile(values, q)
        return None if value is None else value * 1e3

    # The server's stamps in each stream's first chunk split its TTFT: request stamp to the
    # server's receipt (client set-up, TCP connect, request write), then the server's own
    # lateness past 200 ms, then delivery.
    firsts = [(t.request_ns, t.chunks[0].data) for t in result.traces if t.chunks]
    setup = [(data["received_ns"] - stamp) / 1e9 for stamp, data in firsts]
    late = [(d["sent_ns"] - d["received_ns"]) / 1e9 - FIRST_TOKEN_MS / 1e3 for _, d in firsts]
    return {
        "tool": PROBED if probe else PLUGIN,
        "probes": len(result.probe.samples) if result.probe is not None else 0,
        "streams": streams,
        "requests": len(result.traces),
        "completed": result.completed,
        "ttft_p50": ms(result.ttft, 50),
        "ttft_p99": ms(result.ttft, 99),
        "gap_p50": ms(result.gaps, 50),
        "delivery_p50": ms(result.delivery, 50),
        "delivery_p99": ms(result.delivery, 99),
        "setup_p50": ms(setup, 50),
        "setup_p99": ms(setup, 99),
        "server_late_p50": ms(late, 50),
    }


def first_stream_child(url: str) -> dict[str, Any]:
    """The child's side of the first-stream row: ``load(n=1)`` four times, their TTFTs."""
    from pytest_streamguard.load import LoadPlan
    from pytest_streamguard.load import run as run_load

    make = chat_recorders(url, chat_body(2, content=None))

    ttfts = []
    clients = []
    for _ in range(4):
        trace = run_load(LoadPlan(n=1), make).traces[0]
        first = trace.chunks[0]
        ttfts.append((first.stamp_ns - trace.request_ns) / 1e6)
        # TTFT less the server's own time (receipt to write): what the client side added.
        clients.append(ttfts[-1] - (first.data["sent_ns"] - first.data["received_ns"]) / 1e6)
    return {"ttft": ttfts, "client": clients}


def first_stream_row(url: str, processes: int) -> dict[str, Any]:
    """Per fresh process: first stream's TTFT minus the median of the three later ones."""
    differences = []
    client_differences = []
    firsts = []
    for _ in range(processes):
        argv = [sys.executable, str(Path(__file__).resolve()), "--first-stream", url]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        got = json.loads(done.stdout.splitlines()[-1])
        firsts.append(got["ttft"][0])
        differences.append(got["ttft"][0] - statistics.median(got["ttft"][1:]))
        client_differences.append(got["client"][0] - statistics.median(got["client"][1:]))
    return {
        "processes": processes,
        "first_p50": statistics.median(firsts),
        "difference_p50": statistics.median(differences),
        "differences": differences,
        "client_differences": client_differences,
    }


def compare(
    counts: list[int],
    rounds: int,
    aiperf: str | None,
    reuse: str,
    first_processes: int,
    probe: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Every run, alternating tools per round; the first-stream row; a note."""
    argv = [sys.executable, str(HERE / "openai_server.py"), "--tokens", str(TOKENS)]
    process, ready = start_json(argv, new_session=False)
    url = ready["url"]
    runs: list[dict[str, Any]] = []
    note = ""
    try:
        tokenizer = tokenizer_dir() if aiperf else ""
        if aiperf is None:
            note = "AIPerf not found (--aiperf, STREAMGUARD_AIPERF, .venv-aiperf): skipped"
        first = first_stream_row(url, first_processes)
        for streams in counts:
            duration = duration_for(streams)
            for index in range(rounds):
                order = ["aiperf", "plugin"] if index % 2 == 0 else ["plugin", "aiperf"]
                if probe:
                    order += ["probe"]
                    if index % 2:
                        order.reverse()
                for tool in order:
                    if tool == "probe":
                        runs.append(run_plugin(url, streams, duration, probe=True))
                    elif tool == "plugin":
                        runs.append(run_plugin(url, streams, duration))
                    elif aiperf is not None:
                        runs.append(run_aiperf(aiperf, url, streams, duration, reuse, tokenizer))
    finally:
        stop(process)
    return runs, first, note


def table(runs: list[dict[str, Any]], first: dict[str, Any], note: str) -> list[str]:
    """The comparison as markdown lines, with each goal's verdict."""
    lines = [
        "| tool | streams | requests | TTFT p50 ms | TTFT p99 ms | gap p50 ms | "
        "TTFT p50 - 200 | gap p50 - 20 | note |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for run in runs:
        extra = run.get("note", "")
        if run["tool"] in (PLUGIN, PROBED):
            probes = f"; {run['probes']} probes" if run["tool"] == PROBED else ""
            extra = (
                f"{run['completed']}/{run['requests']} completed; request stamp to server "
                f"receipt p50/p99 {run['setup_p50']:.2f}/{run['setup_p99']:.2f} ms; server late "
                f"p50 {run['server_late_p50']:.2f} ms; delivery p50/p99 "
                f"{run['delivery_p50']:.2f}/{run['delivery_p99']:.2f} ms{probes}"
            )
        lines.append(
            f"| {run['tool']} | {run['streams']} | {run['requests']} | {run['ttft_p50']:.2f} | "
            f"{run['ttft_p99']:.2f} | {run['gap_p50']:.3f} | "
            f"{run['ttft_p50'] - FIRST_TOKEN_MS:+.2f} | {run['gap_p50'] - INTERVAL_MS:+.3f} | "
            f"{extra} |"
        )
    lines.append("")
    lines.append(
        f"first stream of a session (load(n=1) x 4 in each of {first['processes']} fresh "
        f"processes): first TTFT p50 {first['first_p50']:.2f} ms; first minus the later ones' "
        f"median, p50 over processes {first['difference_p50']:+.2f} ms "
        f"({', '.join(f'{d:+.2f}' for d in first['differences'])}); the same for the client's "
        "part (TTFT less the server's receipt-to-write time): "
        f"{', '.join(f'{d:+.2f}' for d in first['client_differences'])}"
    )
    lines += verdicts(runs)
    if note:
        lines.append(note)
    return lines


def verdicts(runs: list[dict[str, Any]]) -> list[str]:
    """Per count: plugin vs AIPerf medians over rounds against the goals."""
    lines = []
    for streams in sorted({r["streams"] for r in runs}):
        mine = [r for r in runs if r["streams"] == streams and r["tool"] == PLUGIN]
        peer = [r for r in runs if r["streams"] == streams and r["tool"].startswith("AIPerf")]
        probed = [r for r in runs if r["streams"] == streams and r["tool"] == PROBED]
        gap = statistics.median(r["gap_p50"] for r in mine)
        text = f"{streams} streams: plugin gap p50 {gap - INTERVAL_MS:+.3f} ms from 20 ms " + (
            "(within 0.5)" if abs(gap - INTERVAL_MS) <= 0.5 else "(OVER 0.5)"
        )
        for key in ("ttft_p50", "ttft_p99") if peer else ():
            a = statistics.median(r[key] for r in mine)
            b = statistics.median(r[key] for r in peer)
            bound = max(2.0, 0.01 * b)
            verdict = "within" if abs(a - b) <= bound else "OVER"
            text += (
                f"; {key} plugin {a:.2f} vs AIPerf {b:.2f} ({a - b:+.2f}, {verdict} {bound:.2f})"
            )
        if probed:
            moved = statistics.median(r["ttft_p50"] for r in probed) - statistics.median(
                r["ttft_p50"] for r in mine
            )
            text += (
                f"; probe cost: TTFT p50 {moved:+.2f} ms with the probe on "
                f"({'within' if abs(moved) <= 1.0 else 'OVER'} 1 ms; medians of "
                f"{len(probed)} and {len(mine)} runs)"
            )
        lines.append(text)
    return lines


def main() -> int:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="10,100,500")
    parser.add_argument("--rounds", type=int, default=2, help="runs per tool and count")
    parser.add_argument("--aiperf", help="path of the aiperf executable, or none to skip it")
    parser.add_argument("--reuse", default="never", choices=("never", "pooled"))
    parser.add_argument("--first-processes", type=int, default=5)
    parser.add_argument("--plugin-load", nargs=3, metavar=("URL", "STREAMS", "SECONDS"))
    parser.add_argument("--first-stream", metavar="URL")
    parser.add_argument(
        "--probe", action="store_true", help="also run the plugin's load with its probe on"
    )
    parser.add_argument("--with-probe", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.plugin_load:
        url, streams, seconds = options.plugin_load
        print(json.dumps(plugin_load(url, int(streams), float(seconds), options.with_probe)))
        return 0
    if options.first_stream:
        print(json.dumps(first_stream_child(options.first_stream)))
        return 0
    counts = [int(n) for n in options.streams.split(",")]
    aiperf = find_aiperf(options.aiperf, anywhere=True)
    runs, first, note = compare(
        counts, options.rounds, aiperf, options.reuse, options.first_processes, options.probe
    )
    print("\n".join(table(runs, first, note)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
