"""``streamguard.ingress()``: a real nginx between the proxy and the app, recorded like a fault,
undone after the test."""

from __future__ import annotations

import sys

import pytest
from plugin_helpers import pid_alive
from served import STREAM_APP


def test_ingress_cuts_a_silent_stream_and_is_undone(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(
        """
        import pytest

        # first_token_s=1.0 is a 1 s silence before the first event; nginx allows 0.5 s.
        SLOW = {"max_new_tokens": 4, "first_token_s": 1.0}

        @pytest.mark.token_deadline(ttft=2.0)
        def test_cut_by_the_ingress(streamguard):
            ingress = streamguard.ingress(read_timeout=0.5)
            assert streamguard.proxy.upstream == ingress.address
            with open("nginx_pid", "w") as f:
                f.write(str(ingress.pid))
            trace = streamguard.stream(json=SLOW)
            assert not trace.completed
            assert "upstream timed out" in ingress.error_log()

        @pytest.mark.token_deadline(ttft=2.0)
        def test_next_test_reaches_the_app_directly(streamguard):
            assert streamguard.proxy.upstream == streamguard.target.address
            assert streamguard.stream(json=SLOW).completed

        def test_twice_is_an_error(streamguard):
            streamguard.ingress()
            with pytest.raises(Exception, match="already on for this test"):
                streamguard.ingress()
        """
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{sys.executable} {STREAM_APP} --port {{port}}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*stream 1 (POST /generate): stream did not complete*active faults: "
            "ingress(read_timeout=0.5, buffering=False, gzip=False, send_timeout=60.0)",
            "*fault on: ingress(read_timeout=0.5*",
            "*test_cut_by_the_ingress*FAIL*ingress(read_timeout=0.5*",
        ]
    )
    assert not pid_alive(int((pytester.path / "nginx_pid").read_text()))


def test_target_variants_share_one_process_per_args(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    pytester.makepyfile(
        """
        import pytest

        VARIANT = ["--host", "127.0.0.1"]

        @pytest.fixture(scope="module")
        def streamguard_target(make_streamguard_target):
            return make_streamguard_target(args=VARIANT)

        def test_variant(streamguard, make_streamguard_target):
            assert make_streamguard_target(args=VARIANT) is streamguard.target
            default = make_streamguard_target()
            assert default.pid != streamguard.target.pid
            assert streamguard.proxy.upstream == streamguard.target.address
            assert streamguard.stream(json={"max_new_tokens": 2}).completed
            with pytest.raises(TypeError, match="expected a list of strings"):
                make_streamguard_target(args="--naive")
        """
    )
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{sys.executable} {STREAM_APP} --port {{port}}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
