"""``streamguard.load``: many concurrent streams in one test, pooled statistics and deadlines.

Runs reach the example app (real uvicorn on a port-0 socket) and the session's embedded
Toxiproxy server by URL, as in ``test_plugin_runs.py``; one run starts the bundled target and
reads 30 concurrent streams from it.
"""

from __future__ import annotations

import json

import pytest


def test_closed_loop_load_pools_streams_and_checks_pooled_percentile(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import json
        import math
        import pytest

        BODY = {"max_new_tokens": 10, "interval_s": 0.02}

        @pytest.mark.token_deadline(ttft=2.0, chunk=0.2, percentile=95)
        def test_thirty(streamguard):
            result = streamguard.load(30, json=BODY)
            assert len(result.traces) == 30
            assert streamguard.traces == result.traces
            assert result.completed == 30 and result.errored == 0 and result.cut == 0
            assert len(result.ttft) == 30
            assert len(result.gaps) == 30 * 9
            assert all(t.text == "".join(f"tok{i} " for i in range(10)) for t in result.traces)
            # All 30 were in flight together: every stream started before any ended.
            assert max(t.request_ns for t in result.traces) < min(t.end_ns for t in result.traces)
            assert len({t.name for t in result.traces}) == 30
            p95 = result.percentile(95)
            assert p95 == sorted(result.gaps)[math.ceil(0.95 * len(result.gaps)) - 1]
            result.assert_deadline(chunk=0.2, percentile=95)
            with open("summary.json", "w") as f:
                json.dump(result.summary(), f)
        """
    )
    result = run("--streamguard-json", "report.json")
    result.assert_outcomes(passed=1)
    summary = json.loads((pytester.path / "summary.json").read_text())
    assert summary["load"] == "closed loop, 30 concurrent streams"
    assert summary["streams"] == 30
    # The pooled gaps' percentiles; a busy machine coalesces chunks into one read (gaps of 0,
    # named ``bursts``), so the p50 can be 0.
    assert 0 <= summary["gap_p50_s"] <= summary["gap_p95_s"] < 0.2, summary
    assert summary["gap_p95_s"] > 0, summary
    report = json.loads((pytester.path / "report.json").read_text())
    traces = report["tests"][0]["traces"]
    assert len(traces) == 30
    # Each trace names its connection (client address:port, one per stream), the kernel's
    # stamps (Linux), and the client's own delays: the request was stamped written after it
    # was queued.
    assert all(t["local"].startswith("127.0.0.1:") for t in traces)
    assert len({t["local"] for t in traces}) == 30
    assert {t["stamps"] for t in traces} == {"kernel"}
    assert all(t["queued_ns"] < t["request_ns"] for t in traces)
    assert all(t["client_delay_s"]["write"] > 0 and t["read_delay_ns"] for t in traces)
    # The Toxiproxy given by URL runs here: its waits for a CPU over the streams' silences of
    # 50 ms or more (a busy machine's) are read too, each at a read of the stream's.
    for t in traces:
        assert all(t["request_ns"] < at <= t["end_ns"] and ns >= 0 for at, ns in t["proxy_waits"])
    result.stdout.fnmatch_lines(["*test_thirty * 300 * pass  -"])


def test_duration_keeps_workers_busy_and_open_loop_poisson(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import time

        BODY = {"max_new_tokens": 3, "interval_s": 0.05}

        def test_closed_with_duration(streamguard):
            result = streamguard.load(4, json=BODY, duration=0.5)
            # Each stream lasts ~0.1 s, so each of the 4 workers re-sent several times.
            assert len(result.traces) >= 8, len(result.traces)
            assert result.completed == len(result.traces)
            # No stream started after the duration ended (0.15 s slack for a loaded machine).
            first = min(t.request_ns for t in result.traces)
            assert max(t.request_ns for t in result.traces) - first < 0.5e9 + 0.15e9
            assert result.plan.describe() == "closed loop, 4 concurrent streams for 0.5 s"

        def test_open_loop(streamguard):
            before = time.perf_counter_ns()
            result = streamguard.load(6, json=BODY, rate=20, arrival="poisson", seed=3)
            assert len(result.traces) == 6
            starts = [t.request_ns for t in result.traces]
            expected = result.plan.start_offsets()
            # Requests left on schedule: the planned offsets reach 0.17 s, so sent at once the
            # last would be 0.17 s early, and sent each after the one before ended (0.15 s
            # streams) the fourth would be 0.37 s late. None leaves before its offset from a
            # stamp taken before the load began (a busy machine only makes a request late) ...
            since = [(s - before) / 1e9 for s in starts]
            assert all(s >= e for s, e in zip(since, expected)), (since, expected)
            # ... nor more than 0.3 s after its offset from the first request (a late first
            # one makes the rest look early by as much, never late).
            offsets = [(s - starts[0]) / 1e9 for s in starts]
            assert all(o - e < 0.3 for o, e in zip(offsets, expected)), (offsets, expected)
        """
    )
    run().assert_outcomes(passed=2)


def test_errors_and_cuts_count_as_violations(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest
        from pytest_streamguard import DeadlineViolation

        @pytest.mark.token_deadline(chunk=0.5, percentile=95)
        def test_some_fail(streamguard):
            good = {"max_new_tokens": 5, "interval_s": 0.01}
            failing = {"max_new_tokens": 5, "interval_s": 0.01, "fail_after": 2}
            result = streamguard.load(5, json=good)
            bad = streamguard.load(3, json=failing)
            assert bad.errored == 3 and bad.completed == 0
            with pytest.raises(DeadlineViolation, match="did not complete"):
                bad.assert_deadline(chunk=0.5, percentile=95)
            result.assert_deadline(chunk=0.5, percentile=95)
            assert len(streamguard.traces) == 8
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    # The plugin's own check after the body: three violations, each naming its stream.
    result.stdout.fnmatch_lines(
        [
            "*DeadlineViolation: token deadline violated (3 in 3 streams):",
            "*stream 6 (POST /generate): stream did not complete (server: server sent event: "
            "error: generation failed after 2 tokens) after 2 chunks*",
        ]
    )


def test_pooled_percentile_over_every_stream(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import pytest

        # 102 gaps in all, 3 of them (under 3%) 2 s: the pooled p95 is a fast gap. Checked
        # per stream it would fail, since each slow stream's only gap is a slow one. The bound
        # sits between a fast gap (0.01 s; a 2-core machine with both cores busy has made
        # single ones of 0.3 s and more, and p95 still tolerates two such) and a slow one
        # (2 s at least: the app sleeps it).
        @pytest.mark.token_deadline(chunk=1.0, percentile=95)
        def test_tail_within_p95(streamguard):
            streamguard.load(7, json={"max_new_tokens": 13, "interval_s": 0.01})
            streamguard.load(3, json={"max_new_tokens": 2, "interval_s": 2.0})
            streamguard.load(3, json={"max_new_tokens": 6, "interval_s": 0.01})
            assert len(streamguard.traces) == 13

        @pytest.mark.token_deadline(chunk=1.0, percentile=90)
        def test_tail_over_p90(streamguard):
            streamguard.load(4, json={"max_new_tokens": 3, "interval_s": 0.01})
            streamguard.load(2, json={"max_new_tokens": 2, "interval_s": 2.0})
        """
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*DeadlineViolation: token deadline violated (1 in 1 stream):",
            # The slow gaps are about 2 s, a little less when the first chunk's read was
            # late (0.996 s was seen for a 1 s sleep); the count of gaps over is the point.
            "*6 streams pooled: p90 gap *.* s > chunk deadline 1.000 s (2 of 10 gaps over, "
            "in 2 streams; worst *.* s before chunk 1 of stream *",
            "*timeline of stream *",
        ]
    )


def test_async_twin(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        import asyncio

        import pytest

        @pytest.mark.asyncio
        async def test_aload(streamguard):
            result = await streamguard.aload(10, json={"max_new_tokens": 4, "interval_s": 0.01})
            assert result.completed == 10
            assert len(streamguard.traces) == 10

        @pytest.mark.asyncio
        async def test_sync_load_in_async_test_says_what_to_use(streamguard):
            with pytest.raises(RuntimeError, match="use 'await streamguard.aload"):
                streamguard.load(2)

        @pytest.mark.asyncio
        async def test_concurrent_astreams_get_distinct_names(streamguard):
            body = {"max_new_tokens": 3, "interval_s": 0.01}
            traces = await asyncio.gather(*(streamguard.astream(json=body) for _ in range(3)))
            await streamguard.aload(2, json=body)
            names = [t.name for t in streamguard.traces]
            expected = [f"stream {i} (POST /generate)" for i in (1, 2, 3)]
            assert sorted(t.name for t in traces) == expected
            assert len(set(names)) == 5, names
        """
    )
    run().assert_outcomes(passed=3)


def test_thirty_streams_on_the_bundled_target_meet_p95_gap(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(
        """
        import pytest

        # Issue 6's acceptance bound: 30 concurrent streams, p95 gap under 0.2 s.
        @pytest.mark.token_deadline(ttft=10.0, chunk=0.2, percentile=95)
        def test_thirty_concurrent(streamguard):
            body = {"prompt": "hello", "max_new_tokens": 32}
            result = streamguard.load(30, json=body)
            assert result.completed == 30, [t.error for t in result.traces if t.error]
            assert len(result.gaps) == 30 * 31
            # Client stamps are on the target's clock: each after its send stamp, but for the
            # error of converting the kernel's CLOCK_REALTIME receive stamp (microseconds; a
            # busy run saw -41 us before the conversion took its tightest clock read); another
            # clock would be off by hours.
            assert len(result.delivery) == 30 * 32
            assert min(result.delivery) > -0.001
        """
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_cuts_resets_and_timeouts_through_the_load_transport(
    pytester: pytest.Pytester, run
) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        """
        BODY = {"max_new_tokens": 50, "interval_s": 0.01, "pad": 100}

        def test_cut(streamguard):
            streamguard.faults.cut(after_bytes=2000)
            result = streamguard.load(3, json=BODY)
            assert result.cut == 3 and result.completed == 0, [t.error for t in result.traces]
            assert all(t.error_kind == "cut" and t.chunks for t in result.traces)

        def test_reset(streamguard):
            streamguard.faults.reset(after_ms=100)
            result = streamguard.load(3, json=BODY)
            assert result.completed == 0
            assert result.cut + result.errored == 3

        def test_read_timeout(streamguard):
            result = streamguard.load(3, json={"first_token_s": 5.0}, read_timeout=0.3)
            assert result.errored == 3
            assert all(t.error_kind == "timeout" for t in result.traces), result.traces[0].error
            assert all(t.total < 2.0 for t in result.traces)
        """
    )
    run().assert_outcomes(passed=3)
