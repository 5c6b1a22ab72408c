"""Kill pytest hard or soft at each phase: nothing it started may survive it.

Each case runs an inner pytest session in a subprocess (own session, so the outer test can
clean up after a failure), waits until the inner run reached the phase (a marker file written
from inside it), records every process below it and the ports they listen on, sends SIGKILL or
SIGTERM to the pytest process only (as a CI runner or OOM killer would), and then asserts that
within ``GONE_LIMIT_S`` every recorded process is gone, none of the ports listens, and the
run's private TMPDIR (nginx prefixes live there) is empty.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from lifecycle_procs import (
    TOKEN_ENV,
    alive,
    listening_ports,
    ports_listening_now,
    started_by,
    wait_until,
)

HERE = Path(__file__).resolve().parent
WRAPPER = HERE / "lifecycle_wrapper.py"
STREAM_APP = HERE.parents[1] / "examples" / "stream_app.py"
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
GONE_LIMIT_S = 15.0
"""The clean-up's own schedule is about a second (SIGTERM to every group, SIGKILL to what is
left a second later); what this bound tells apart is that from an orphan, which lives until
someone kills it. Generous, because a killed pytest on a busy machine is slow to be reaped."""

INNER = """
import os, threading, time

MARKERS = os.environ["LIFECYCLE_MARKERS"]
LONG = {"max_new_tokens": 100000, "interval_s": 0.05}


def _mark_when_streaming(guard, streams):
    # Runs beside the test body: the marker appears once the app is writing ``streams``.
    def watch():
        while True:
            metrics = guard.target.metrics()
            if metrics["stream_app_active_streams"].samples[0].value >= streams:
                path = os.path.join(MARKERS, f"mid-{os.getpid()}")
                open(path + ".tmp", "w").close()
                os.replace(path + ".tmp", path)
                return
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


@pytest.mark.parametrize("copy", [1, 2])
def test_phase(streamguard, copy):
    phase = os.environ["LIFECYCLE_PHASE"]
    if phase == "stream":
        _mark_when_streaming(streamguard, 1)
        streamguard.stream(json=LONG)
    elif phase == "load":
        _mark_when_streaming(streamguard, 3)
        streamguard.load(3, json=LONG)
    elif phase == "ingress":
        streamguard.ingress()
        _mark_when_streaming(streamguard, 1)
        streamguard.stream(json=LONG)
"""

APP = f"{sys.executable} {STREAM_APP} --port {{port}}"
TARGETS = {
    # sh forks the app (a command follows it), so the app is the plugin's grandchild.
    "sh-wrapper": f"sh -c '{APP}; true'",
    # A Python wrapper that ignores SIGTERM and outlives its child: only SIGKILL ends it.
    "ignores-term": f"{sys.executable} {WRAPPER} --ignore-term -- {APP}",
}

CASES = [
    ("startup", "KILL", "sh-wrapper", 1),
    ("startup", "TERM", "ignores-term", 1),
    ("stream", "KILL", "ignores-term", 1),
    ("stream", "TERM", "sh-wrapper", 1),
    ("load", "KILL", "sh-wrapper", 1),
    ("load", "TERM", "ignores-term", 1),
    ("ingress", "KILL", "ignores-term", 1),
    ("ingress", "TERM", "sh-wrapper", 1),
    ("startup", "KILL", "ignores-term", 2),
    ("stream", "TERM", "ignores-term", 2),
    ("load", "KILL", "sh-wrapper", 2),
    ("ingress", "KILL", "sh-wrapper", 2),
]


def _target_cmd(phase: str, target: str, markers: Path) -> str:
    if phase != "startup":
        return TARGETS[target]
    flags = "--ignore-term " if target == "ignores-term" else ""
    wrapped = f"{sys.executable} {WRAPPER} {flags}--never-ready {markers} --port {{port}}"
    return wrapped if target == "ignores-term" else f"sh -c '{wrapped}; true'"


@pytest.mark.parametrize(
    ("phase", "sig", "target", "workers"),
    CASES,
    ids=[f"{p}-SIG{s}-{t}-{'n2' if w == 2 else 'single'}" for p, s, t, w in CASES],
)
def test_nothing_survives_a_killed_pytest(
    pytester: pytest.Pytester, phase: str, sig: str, target: str, workers: int
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner="import pytest\n" + INNER)
    markers = pytester.path / "markers"
    markers.mkdir()
    tmpdir = pytester.path / "tmp"
    tmpdir.mkdir()
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        TOKEN_ENV: token,
        "TMPDIR": str(tmpdir),
        "LIFECYCLE_MARKERS": str(markers),
        "LIFECYCLE_PHASE": phase,
    }
    # The first copy blocks, so under xdist (each worker runs every test) both reach the phase.
    selection = ["test_inner.py::test_phase[1]"]
    if workers == 2:
        selection += ["-n", "2", "--dist", "each"]
    argv = [
        *(sys.executable, "-m", "pytest", "--streamguard", "-p", "no:cacheprovider"),
        *("--streamguard-target-cmd", _target_cmd(phase, target, markers), *selection),
    ]
    process = subprocess.Popen(
        argv,
        cwd=pytester.path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    recorded: set[tuple[int, str]] = set()
    try:
        wait_until(
            lambda: len(list(markers.glob("*[0-9]"))) >= workers,
            time.monotonic() + 60,
            f"{workers} inner run(s) to reach the {phase} phase",
        )
        recorded = started_by(process.pid, token)
        ports = listening_ports(recorded)
        # Each run: the target, the Toxiproxy API and the proxy (and nginx) listen; during
        # startup only the target's port, with no answer behind it.
        assert len(ports) >= workers * (1 if phase == "startup" else 3), (ports, recorded)
        killed_at = time.monotonic()
        os.kill(process.pid, getattr(signal, f"SIG{sig}"))
        process.wait(10)
        deadline = killed_at + GONE_LIMIT_S
        wait_until(
            lambda: not any(alive(ident) for ident in recorded),
            deadline,
            "every process the run started to end: "
            + repr(sorted(i for i in recorded if alive(i))),
        )
        wait_until(
            lambda: not (ports & ports_listening_now()),
            deadline,
            f"ports {sorted(ports & ports_listening_now())} to stop listening",
        )
        wait_until(
            lambda: not any(tmpdir.iterdir()),
            deadline,
            f"the run's temporary files to go: {sorted(p.name for p in tmpdir.iterdir())}",
        )
        assert not started_by(process.pid, token)
    finally:
        # Only on failure is anything left; do not let it outlive this test.
        if process.poll() is None:
            process.kill()
            process.wait(10)
        for pid, _ in recorded | started_by(process.pid, token):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
