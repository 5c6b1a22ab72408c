"""The plugin end to end through pytester: real target, real embedded Toxiproxy server.

Most runs reach one embedded server started for the whole test session by URL
(``--streamguard-toxiproxy``, i.e. addressed as if it were a real toxiproxy-server) and the
example app served by uvicorn (``--streamguard-target-url``), so each run costs a fraction of a
second. Runs that exercise process management start their own.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from plugin_helpers import pid_alive
from served import STREAM_APP


def test_passing_stream_and_summary_row(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
        def test_fast(streamguard):
            trace = streamguard.stream("/generate", json={"max_new_tokens": 5, "interval_s": 0.02})
            assert trace.completed
            assert trace.text == "tok0 tok1 tok2 tok3 tok4 "
            assert streamguard.traces == [trace]
            assert streamguard.url.startswith("http://127.0.0.1:")
            assert trace.url.startswith(streamguard.url)
        """
    )
    result = run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "streamguard: target=url http://127.0.0.1:*, toxiproxy=external http://127.0.0.1:* "
            "(version 2.12.0), default deadline ttft=0.5s chunk=0.2s, "
            "seed=* (not that server's own draws)",
            "*= streamguard =*",
            "target: http://127.0.0.1:*; toxiproxy: external http://127.0.0.1:* 2.12.0",
            "test * ttft * gap p50 * gap p95 * gap max * chunks * verdict * faults",
            "test_passing_stream_and_summary_row.py::test_fast * 5 * pass  -",
        ]
    )


def test_violation_fails_with_message_and_timeline(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        # The stall goes on once the client has read 2 events, through an API call: the 3rd
        # event must still be on its way then. 300 ms between tokens leaves that call (ms)
        # room on a busy machine, where a late event can arrive just before the next one
        # (100 ms did not: the stall landed after event 2). The deadline (0.8 s) is far from
        # both a normal gap (0.3 s) and the stalled one (1.6 s and more).
        @pytest.mark.token_deadline(ttft=0.5, chunk=0.8)
        def test_stalled(streamguard):
            streamguard.faults.stall(after_chunks=2, seconds=1.6)
            streamguard.stream(json={"max_new_tokens": 4, "interval_s": 0.3})
        """
    )
    result = run()
    # An assertion failure in the call phase, not a setup/teardown error.
    result.assert_outcomes(failed=1)
    # The stalled gap is the one named; how many gaps are over may be 2 on a machine with a
    # core kept busy (an event 0.85 s late before the stall went on was seen once).
    result.stdout.fnmatch_lines(
        [
            "*DeadlineViolation: token deadline violated (1 in 1 stream):",
            "*stream 1 (POST /generate): gap before chunk 2 = *.* s > chunk deadline 0.800 s "
            "(* of 3 gaps over); active faults: stall(after_chunks=2, seconds=1.6)",
            "*timeline of stream 1 (POST /generate) (ms since request sent):",
            "*fault on: stall(after_chunks=2, seconds=1.6)",
            "*chunk 2 (* B) +* <-- over 800.0 ms",
            "*end: completed",
        ]
    )
    result.stdout.fnmatch_lines(["*test_stalled * FAIL  stall(after_chunks=2, seconds=1.6)"])


def test_bare_marker_uses_configured_defaults(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline
        def test_slow_first_token(streamguard):
            streamguard.stream(json={"max_new_tokens": 2, "first_token_s": 0.7, "interval_s": 0.01})
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    # A first token 0.7 s after the headers (later on a busy machine) over a 0.5 s default.
    result.stdout.fnmatch_lines(["*ttft *.* s > deadline 0.500 s*"])
    result = run("--streamguard-ttft", "2.0")
    result.assert_outcomes(passed=1)


def test_explicit_assert_deadline_and_async_twin(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest
        from pytest_streamguard import DeadlineViolation

        def test_explicit(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 3, "first_token_s": 0.3})
            # The first token comes 0.3 s after the headers, which a busy machine may delay.
            trace.assert_deadline(ttft=2.0)
            with pytest.raises(DeadlineViolation, match=r"ttft \\d+\\.\\d{3} s > deadline 0.100 s"):
                trace.assert_deadline(ttft=0.1)

        @pytest.mark.asyncio
        @pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
        async def test_async(streamguard):
            trace = await streamguard.astream(json={"max_new_tokens": 3, "interval_s": 0.02})
            assert trace.completed
            assert len(trace.chunks) == 3

        def test_explicit_failure(streamguard):
            trace = streamguard.stream(json={"max_new_tokens": 3, "first_token_s": 0.3})
            trace.assert_deadline(ttft=0.1)
        """
    )
    quiet = run("-q")
    quiet.assert_outcomes(passed=2, failed=1)
    quiet.stdout.fnmatch_lines(
        ["streamguard: 3 tests read streams, 1 violated a deadline, 1 caught as expected"]
    )
    result = run("--streamguard-json", "out.json")
    result.assert_outcomes(passed=2, failed=1)
    verdicts = {
        record["nodeid"].split("::")[-1]: (record["verdict"], record["violations"])
        for record in json.loads((pytester.path / "out.json").read_text())["tests"]
    }
    # An expected violation the plugin found is "caught", not "unchecked"; one that failed the
    # test is a FAIL.
    assert verdicts["test_explicit"][0] == "caught"
    # The app holds the first token 0.3 s; a busy machine adds to it, so any figure over 0.1.
    assert re.search(r"ttft \d+\.\d{3} s > deadline 0\.100 s", verdicts["test_explicit"][1][0])
    assert verdicts["test_async"] == ("pass", [])
    assert verdicts["test_explicit_failure"][0] == "FAIL"
    result.stdout.fnmatch_lines(["*test_explicit *caught*", "all 3 tests*1 FAIL, 1 caught*"])


def test_formats_through_the_proxy(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        FORMATS = [
            ("/generate", "sse"),
            ("/v1/completions", "openai"),
            ("/ndjson", "ndjson"),
            ("/generate", "raw"),
        ]

        # What is checked is each format read through the proxy; the deadline only has to
        # hold on a busy machine (headers took 0.69 s once with a core kept busy).
        @pytest.mark.token_deadline(ttft=5.0, chunk=2.0)
        @pytest.mark.parametrize(("path", "fmt"), FORMATS)
        def test_format(streamguard, path, fmt):
            body = {"max_new_tokens": 3, "interval_s": 0.02, "stream": True}
            trace = streamguard.stream(path, json=body, format=fmt)
            assert trace.completed
            assert "tok2" in trace.text
        """
    )
    run().assert_outcomes(passed=4)


def test_a_stream_error_is_a_violation(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=1.0, chunk=1.0)
        def test_generation_fails(streamguard):
            streamguard.stream(json={"max_new_tokens": 5, "interval_s": 0.01, "fail_after": 2})
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*stream did not complete (server: server sent event: error: generation failed after "
            "2 tokens) after 2 chunks*"
        ]
    )


FAULT_TESTS = """
import pytest

BODY = {"max_new_tokens": 6, "interval_s": 0.03}

def test_latency(streamguard):
    record = streamguard.faults.latency(300)
    trace = streamguard.stream(json=BODY)
    assert trace.completed
    # A 300 ms toxic on a stream whose first token is immediate (tolerance: 60 ms below).
    assert trace.ttft >= 0.24
    # Latency shifts the stream, it does not stretch the gaps: stretched, every gap would be
    # 0.33 s or more; shifted they are ~0.03 s, and the median ignores one scheduling hiccup.
    assert sorted(trace.gaps)[len(trace.gaps) // 2] < 0.15
    assert trace.faults == [record]

def test_stall(streamguard):
    streamguard.faults.stall(after_chunks=3, seconds=1.0)
    trace = streamguard.stream(json={"max_new_tokens": 6, "interval_s": 0.3})
    assert trace.completed
    assert trace.text.count("tok") == 6
    gaps = trace.gaps
    assert gaps.index(max(gaps)) == 2  # the gap after chunk 3
    # The proxy holds 1 s from when it sent chunk 3; the client's gap differs from that by
    # how much sooner chunk 4 than chunk 3 crossed loopback (well under 50 ms).
    assert max(gaps) >= 0.95
    (record,) = trace.faults
    assert record.applied_by == "proxy"
    assert record.on_ns == trace.chunks[2].stamp_ns

def test_slow_reader(streamguard):
    streamguard.faults.slow_reader(bytes_per_second=5000)
    trace = streamguard.stream(json={"max_new_tokens": 10, "interval_s": 0, "pad": 500})
    assert trace.completed
    # ~5.4 kB at 5 kB/s: at least 0.8 s even with generous rounding.
    assert trace.total >= 0.8

def test_slow_reader_timeout_names_the_rate(streamguard):
    # 100 bytes/s against 500-byte chunks: a chunk takes seconds, the read limit is 0.5 s.
    streamguard.faults.slow_reader(100)
    trace = streamguard.stream(
        json={"max_new_tokens": 10, "interval_s": 0, "pad": 500}, read_timeout=0.5
    )
    assert trace.error_kind == "timeout", trace.error
    assert "the client read at slow_reader(100), 100 bytes/s" in trace.error

def test_bandwidth(streamguard):
    streamguard.faults.bandwidth(kb_per_second=5)
    trace = streamguard.stream(json={"max_new_tokens": 10, "interval_s": 0, "pad": 500})
    assert trace.completed
    assert trace.total >= 0.8

def test_slicer(streamguard):
    streamguard.faults.slicer(average_size=8, delay_us=5000)
    trace = streamguard.stream(json={"max_new_tokens": 4, "interval_s": 0})
    assert trace.completed
    assert len(trace.reads) >= 3 * len(trace.chunks)
    assert any(c.first_byte_ns < c.stamp_ns for c in trace.chunks)

def test_cut(streamguard):
    streamguard.faults.cut(after_bytes=400)
    trace = streamguard.stream(json={"max_new_tokens": 50, "interval_s": 0.005})
    assert not trace.completed
    assert trace.error_kind == "cut"
    assert 0 < len(trace.chunks) < 50

def test_reset(streamguard):
    streamguard.faults.reset(after_ms=100)
    trace = streamguard.stream(json=BODY)
    assert not trace.completed
    assert trace.error_kind == "reset", trace.error
    assert trace.chunks == []

def test_blackhole(streamguard):
    streamguard.faults.blackhole()
    trace = streamguard.stream(json=BODY, read_timeout=0.5)
    assert not trace.completed
    assert trace.error_kind == "timeout"
    assert trace.chunks == []
    assert trace.total < 5

def test_down(streamguard):
    streamguard.faults.down()
    trace = streamguard.stream(json=BODY)
    assert trace.error_kind == "connect"

def test_faults_are_undone_between_tests(streamguard, toxiproxy):
    proxy = toxiproxy.get_proxy(streamguard.proxy.name)
    assert proxy.enabled
    assert proxy.toxics() == {}
    assert streamguard.stream(json=BODY).completed

@pytest.mark.parametrize(("call", "message"), [
    ("latency(-1)", "faults.latency(ms=-1): expected a number of milliseconds >= 0"),
    ("latency(0.3)", "faults.latency(ms=0.3): the latency is in milliseconds, and Toxiproxy "
     "applies whole milliseconds (0.3 ms would be 0); for 0.3 seconds write 300"),
    ("slow_reader(2)", "faults.slow_reader(bytes_per_second=2): the rate is in bytes per "
     "second, so a 1 KB event would take 500 s to read; for 2 KB/s write slow_reader(2000), "
     "or pass tiny=True if 2 bytes/s is meant"),
    ("latency(10, stream='sideways')", "expected one of upstream, downstream"),
    ("stall(0, 1)", "faults.stall(after_chunks=0): expected an integer >= 1"),
    ("slicer(10, size_variation=10)", "expected less than average_size"),
    ("cut(1.5)", "faults.cut(after_bytes=1.5): expected an integer >= 0"),
    ("bandwidth(True)", "faults.bandwidth(kb_per_second=True)"),
])
def test_bad_fault_arguments(streamguard, call, message):
    with pytest.raises(ValueError, match=message.replace("(", "[(]").replace(")", "[)]")):
        eval("streamguard.faults." + call)
"""


def test_each_fault_has_its_effect(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(test_faults=FAULT_TESTS)
    result = run("-v")
    result.assert_outcomes(passed=19)


def test_json_report_and_junit_properties(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
        def test_one(streamguard):
            streamguard.faults.latency(50)
            streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.02})
            streamguard.stream(json={"max_new_tokens": 2, "interval_s": 0.02})
        """
    )
    result = run("--streamguard-json", "out/sg.json", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    report = json.loads(Path(pytester.path, "out", "sg.json").read_text())
    assert report["format"] == "pytest-streamguard"
    assert report["version"] == 2
    assert report["toxiproxy_version"] == "2.12.0"
    (test,) = report["tests"]
    assert test["verdict"] == "pass"
    assert test["deadline"] == {"ttft": 0.5, "chunk": 0.2, "total": None, "percentile": None}
    first, second = test["traces"]
    assert len(first["chunks"]) == 3
    assert len(second["chunks"]) == 2
    stamp = first["chunk_fields"].index("stamp_ns")
    assert all(isinstance(c[stamp], int) for c in first["chunks"])
    assert first["stats"]["ttft_s"] >= 0.04
    (fault,) = first["faults"]
    assert fault["kind"] == "latency"
    assert fault["off_ns"] > fault["on_ns"]
    properties = {
        p.get("name"): p.get("value")
        for p in ET.parse(pytester.path / "junit.xml").iter("property")
    }
    assert float(properties["streamguard_ttft_s"]) >= 0.04
    assert float(properties["streamguard_max_gap_s"]) > 0
    assert properties["streamguard_verdict"] == "pass"


def test_quiet_summary(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
        def test_one(streamguard):
            streamguard.stream(json={"max_new_tokens": 2})
        """
    )
    result = run("-q")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*= streamguard =*")
    result.stdout.fnmatch_lines(["streamguard: 1 test read streams, 0 violated a deadline"])


def test_toxiproxy_fixture_and_target_metrics(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        def test_bound(toxiproxy, streamguard):
            assert streamguard.proxy.name in toxiproxy.proxies()
            assert toxiproxy.version() is not None
            before = streamguard.target.metrics()["stream_app_streams"].samples[0].value
            streamguard.stream(json={"max_new_tokens": 1})
            after = streamguard.target.metrics()["stream_app_streams"].samples[0].value
            assert after == before + 1
        """
    )
    run().assert_outcomes(passed=1)


def test_target_cmd_and_embedded_server_are_started_and_stopped(
    pytester: pytest.Pytester, app_cmd: str
) -> None:
    pids = pytester.path / "pids.json"
    pytester.makepyfile(
        f"""
        import json
        import pytest

        @pytest.mark.token_deadline(ttft=0.5, chunk=0.2)
        def test_started(streamguard, streamguard_toxiproxy_server):
            trace = streamguard.stream(json={{"max_new_tokens": 3, "interval_s": 0.06}})
            assert trace.completed
            assert streamguard_toxiproxy_server.kind == "embedded"
            # The embedded server's wait for a CPU over the silences between tokens is kept.
            assert len(trace.proxy_waits) >= 2, trace.proxy_waits
            with open({str(pids)!r}, "w") as f:
                json.dump([streamguard.target.pid, streamguard_toxiproxy_server.pid], f)
        """
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-target-cmd", app_cmd, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["target: http://127.0.0.1:*; toxiproxy: embedded http://127.0.0.1:* 2.12.0"]
    )
    for pid in json.loads(pids.read_text()):
        assert not pid_alive(pid), f"process {pid} outlived the session"


def test_a_toxiproxy_and_a_target_given_by_url_but_running_here_are_read_as_started_ones(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    """Their waits for a CPU are read through the processes listening on their loopback ports:
    the Toxiproxy's over the silences between tokens, the target's beside each probe sample
    (the app here is served in a thread of this process, the inner run's parent)."""
    pytester.makepyfile(
        """
        def test_by_url(streamguard, streamguard_toxiproxy_server):
            # 1 s: the probe's answers (the first one, its connection, took 0.18 s and more
            # on a busy machine) come while the stream is open.
            trace = streamguard.stream(json={"max_new_tokens": 16, "interval_s": 0.06})
            assert trace.completed
            assert streamguard_toxiproxy_server.kind == "external"
            assert len(trace.proxy_waits) >= 2, trace.proxy_waits
        """
    )
    result = pytester.runpytest_subprocess(
        *("--streamguard", "--streamguard-toxiproxy", toxiproxy_url),
        *("--streamguard-target-url", app_url, "-o", "streamguard_probe_interval=0.01"),
        *("--streamguard-json", "sg.json", "-p", "no:cacheprovider"),
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "sg.json").read_text())["tests"]
    assert record["probe"]["samples"], record["probe"]
    assert len(record["probe"]["cpu_waits"]) >= 1, record["probe"]


def test_target_args_are_appended_to_a_started_target(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    # No {port}: the example app binds port 0 and prints its URL, so the address it listens on
    # is the one the extra flag chose (127.0.0.2 is loopback too).
    pytester.makepyfile(
        """
        def test_started_with_flags(streamguard):
            assert streamguard.target.url.startswith("http://127.0.0.2:")
            assert streamguard.stream(json={"max_new_tokens": 2, "interval_s": 0.01}).completed
        """
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{sys.executable} {STREAM_APP}",
        "--streamguard-target-args",
        "--host 127.0.0.2",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)


def test_target_that_fails_to_start_errors_its_tests(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(
        """
        def test_a(streamguard):
            pass

        def test_b(streamguard):
            pass

        def test_c():
            pass
        """
    )
    crash = (
        f"{sys.executable} -c \"import sys; print('loading model...'); "
        "print('boom: no such model', file=sys.stderr); sys.exit(3)\""
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "--streamguard-target-cmd", crash
    )
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*streamguard target failed to start: target exited before printing its listening line"
            " (exit code 3)*",
            "*--- last output of target ---",
            "*boom: no such model",
        ]
    )


def test_target_that_never_gets_ready_times_out_with_its_output(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile("def test_a(streamguard):\n    pass\n")
    # The standard library's file server answers 404 for /missing, and listens at once: the
    # example app, in a fresh clone (its venv's packages not yet compiled) on a busy machine,
    # had not listened within the 2 s (kept under the 3 s after which a 4xx fails at once).
    app = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1"
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        app,
        "--streamguard-ready-path",
        "/missing",
        "-o",
        "streamguard_startup_timeout=2",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*was not ready at http://127.0.0.1:*/missing within 2 s (last: HTTP 404)*"]
    )


def test_unreachable_toxiproxy_url_is_a_clear_error(
    pytester: pytest.Pytester, app_url: str
) -> None:
    pytester.makepyfile("def test_a(streamguard):\n    pass\n")
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        "http://127.0.0.1:9",
        "--streamguard-target-url",
        app_url,
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*toxiproxy-server at http://127.0.0.1:9 (--streamguard-toxiproxy) did not answer"
            " GET /version*"
        ]
    )
