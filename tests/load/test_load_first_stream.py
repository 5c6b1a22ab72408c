"""The first stream of a session is measured like every later one: a load's one-time set-up
(imports, the client and its transport, the event loop, the first address lookup and the codecs
it needs) happens before a stream's request stamp, never inside its measured window.

Functional, not timed: a fresh interpreter (nothing imported yet, as at the start of a pytest
session) reads two loads from the example app, and every module imported while a stream was
between its request stamp and its first token is reported; none may be.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import json
    import sys

    from pytest_streamguard.stream.client import StreamRecorder
    from pytest_streamguard.stream.request import StreamRequest
    from pytest_streamguard.load import LoadPlan, run

    url = sys.argv[1]
    windows = []


    class Probe(StreamRecorder):
        def start(self):
            self.before = set(sys.modules)
            super().start()


    def make(index):
        request = StreamRequest(
            "POST", url + "/generate", json_body={"max_new_tokens": 2, "interval_s": 0.01}
        )
        recorder = Probe(request, f"stream {index}", on_chunk=lambda trace: seen(recorder))
        return recorder


    def seen(recorder):
        if len(recorder.trace.chunks) == 1:
            windows.append(sorted(set(sys.modules) - recorder.before))


    results = [run(LoadPlan(n=n), make) for n in (1, 3)]
    print(json.dumps({"windows": windows, "completed": [r.completed for r in results]}))
    """
)


def test_first_stream_window_holds_no_one_time_setup(app_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, app_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["completed"] == [1, 3]
    # One window per stream, the session's very first included; each lists the modules first
    # imported between that stream's request stamp and its first token.
    assert report["windows"] == [[], [], [], []]
