"""The Toxiproxy client's session fixtures through the plugin: a conftest overrides them, and a
fault test passes against the ``GET /version`` answer of every real Toxiproxy 2.x release (the
wrapper's own tests are in tests/faults/test_toxiproxy_client.py)."""

from __future__ import annotations

import pytest
from toxiproxy_fronts import version_front
from toxiproxy_releases import RELEASE_ANSWERS


def test_conftest_can_override_the_session_fixtures(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str
) -> None:
    pytester.makeconftest(
        f"""
        import pytest
        from pytest_streamguard import Target
        from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer

        @pytest.fixture(scope="session")
        def streamguard_target():
            return Target({app_url!r}, "mine", "my app")

        @pytest.fixture(scope="session")
        def streamguard_toxiproxy_server():
            return ToxiproxyServer.external({toxiproxy_url!r})
        """
    )
    pytester.makepyfile(
        """
        def test_uses_overrides(streamguard):
            assert streamguard.target.kind == "mine"
            assert streamguard.stream(json={"max_new_tokens": 2}).completed
        """
    )
    pytester.runpytest("--streamguard").assert_outcomes(passed=1)


FAULT_THROUGH_PLUGIN = """
def test_faults(streamguard):
    streamguard.faults.latency(200)
    slow = streamguard.stream(json={"max_new_tokens": 3, "interval_s": 0.01})
    assert slow.completed
    assert slow.ttft >= 0.15  # a 200 ms toxic, 50 ms of tolerance below it
    streamguard.faults.clear()
    streamguard.faults.cut(after_bytes=400)
    cut = streamguard.stream(json={"max_new_tokens": 50, "interval_s": 0.005})
    assert cut.error_kind == "cut"
    assert 0 < len(cut.chunks) < 50
"""


@pytest.mark.parametrize("release", ["2.5.0", "2.6.0", "2.6.0 source build", "2.12.0"])
def test_fault_test_passes_against_each_release_version_answer(
    pytester: pytest.Pytester, app_url: str, toxiproxy_url: str, release: str
) -> None:
    """The plugin, given ``--streamguard-toxiproxy`` of a server answering ``/version`` as
    ``release`` does, accepts it, shows its version and runs a latency and a cut fault through
    it. The front answers only ``/version`` itself; proxies and toxics are created on the
    embedded server, whose API matches 2.12's (what differs between these releases' APIs
    besides ``/version`` is not what this test is about; the real servers were run by hand)."""
    body, content_type, version = RELEASE_ANSWERS[release]
    front = version_front(toxiproxy_url, body, content_type)
    try:
        pytester.makepyfile(FAULT_THROUGH_PLUGIN)
        result = pytester.runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            front.url,
            "--streamguard-target-url",
            app_url,
            "-p",
            "no:cacheprovider",
        )
    finally:
        front.close()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"streamguard: target=url *, toxiproxy=external {front.url} (version {version}), *"]
    )
