"""The user-style example file runs green, and the plugin drives the bundled target."""

from __future__ import annotations

import shutil
import sys

import pytest
from plugin_helpers import pid_alive
from served import EXAMPLES


def test_example_file_passes(pytester: pytest.Pytester, toxiproxy_url: str) -> None:
    for name in ("test_example_stream.py", "stream_app.py"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    result = pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "--streamguard-target-cmd",
        f"{sys.executable} stream_app.py --port {{port}}",
        "-p",
        "no:cacheprovider",
        "test_example_stream.py",
    )
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*test_stream_meets_its_deadlines * 20 * pass  -"])


def test_readme_example_is_the_quickstart_file() -> None:
    readme = (EXAMPLES.parent / "README.md").read_text()
    first_block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert first_block.strip() in (EXAMPLES / "test_quickstart.py").read_text()


def test_bundled_target_is_the_default(pytester: pytest.Pytester, toxiproxy_url: str) -> None:
    shutil.copy(EXAMPLES / "test_quickstart.py", pytester.path / "test_quickstart.py")
    pytester.makepyfile(
        """
        import json
        import pytest

        @pytest.mark.token_deadline(ttft=5.0, chunk=2.0)
        def test_tiny_model(streamguard):
            trace = streamguard.stream(json={"prompt": "hello", "max_new_tokens": 8})
            assert trace.completed, trace.error
            assert len(trace.chunks) == 8
            # The target stamps each token just before writing it, on the same monotonic clock.
            for chunk in trace.chunks:
                assert chunk.data["sent_ns"] <= chunk.stamp_ns
            assert streamguard.target.kind == "bundled"
            assert "streamguard_target_active_streams" in streamguard.target.metrics()
            with open("pid", "w") as f:
                f.write(str(streamguard.target.pid))
        """
    )
    result = pytester.runpytest(
        "--streamguard", "--streamguard-toxiproxy", toxiproxy_url, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*streamguard: target=bundled target_app (tiny model)*"])
    result.stdout.fnmatch_lines(
        ["*test_quickstart.py::test_stream_survives_latency * pass  latency*"]
    )
    assert not pid_alive(int((pytester.path / "pid").read_text()))
