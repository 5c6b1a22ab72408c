"""``--streamguard-proxy-host`` and ``--streamguard-upstream-host``: a Toxiproxy elsewhere.

Linux routes all of 127.0.0.0/8 to the loopback interface, so a proxy that listens on
127.0.0.2 (and an upstream host the target does not listen on) can be told apart from the
default 127.0.0.1 without leaving this machine. The runs reach the session's embedded
Toxiproxy by URL, as they would a real toxiproxy-server: both get the address through the same
API field (``listen``, ``upstream``).
"""

from __future__ import annotations

import pytest
from plugin_helpers import INI

BODY = '{"max_new_tokens": 5, "interval_s": 0.01}'


def test_a_stream_completes_through_a_proxy_on_127_0_0_2(pytester: pytest.Pytester, run) -> None:  # type: ignore[no-untyped-def]
    pytester.makepyfile(
        f"""
        def test_other_loopback_address(streamguard):
            assert streamguard.url.startswith("http://127.0.0.2:"), streamguard.url
            assert streamguard.api.get_proxy(streamguard.proxy.name).listen.startswith(
                "127.0.0.2:"
            )
            trace = streamguard.stream(json={BODY})
            assert trace.completed, trace.error
            assert trace.url.startswith("http://127.0.0.2:")
            assert trace.text == "tok0 tok1 tok2 tok3 tok4 "
            result = streamguard.load(4, json={BODY}, processes=2)
            assert result.completed == 4, result.outcomes
        """
    )
    run("--streamguard-proxy-host", "127.0.0.2").assert_outcomes(passed=1)


def test_ini_keys_set_both_hosts(pytester: pytest.Pytester, run, app_url: str) -> None:  # type: ignore[no-untyped-def]
    pytester.makeini(
        INI + "streamguard_proxy_host = 127.0.0.3\nstreamguard_upstream_host = 127.0.0.1\n"
    )
    port = app_url.rsplit(":", 1)[1]
    pytester.makepyfile(
        f"""
        from pytest_streamguard.guard import route_of


        def test_named_target_reached_by_address(streamguard):
            # The target is named "localhost"; Toxiproxy is told to reach it at 127.0.0.1.
            assert streamguard.target.address == "localhost:{port}"
            assert streamguard.api.upstream(streamguard.proxy) == "127.0.0.1:{port}"
            assert streamguard.url.startswith("http://127.0.0.3:")
            trace = streamguard.stream(json={BODY})
            assert trace.completed, trace.error
            # What an ingress hop is undone back to: the upstream host, not the target's name.
            assert route_of(streamguard).upstream == "127.0.0.1:{port}"
        """
    )
    # A later --streamguard-target-url wins over the fixture's own.
    run("--streamguard-target-url", f"http://localhost:{port}").assert_outcomes(passed=1)


def test_upstream_host_is_where_toxiproxy_dials(
    pytester: pytest.Pytester, run, app_url: str
) -> None:  # type: ignore[no-untyped-def]
    port = app_url.rsplit(":", 1)[1]
    pytester.makepyfile(
        f"""
        def test_nothing_listens_there(streamguard):
            assert streamguard.api.upstream(streamguard.proxy) == "127.0.0.9:{port}"
            # The app listens on 127.0.0.1 only: through the proxy the stream cannot complete.
            trace = streamguard.stream(json={BODY}, read_timeout=5)
            assert not trace.completed and not trace.chunks, trace.error
        """
    )
    run("--streamguard-upstream-host", "127.0.0.9").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--streamguard-proxy-host", "http://127.0.0.2"],
            "ERROR: 'http://127.0.0.2' from --streamguard-proxy-host is not a valid "
            "streamguard_proxy_host: expected a host name or an IP address without a port or "
            "scheme, such as 127.0.0.1, ::1 or toxiproxy.ci.internal",
        ),
        (
            ["--streamguard-upstream-host", "127.0.0.1:8000"],
            "ERROR: '127.0.0.1:8000' from --streamguard-upstream-host is not a valid "
            "streamguard_upstream_host: expected a host name *",
        ),
        (
            ["--streamguard-proxy-host", " "],
            "ERROR: streamguard_proxy_host (--streamguard-proxy-host) is empty: expected a host "
            "name or an IP address, such as 127.0.0.1",
        ),
    ],
)
def test_bad_hosts_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest("--streamguard", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
