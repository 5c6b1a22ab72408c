"""The benchmark scripts' shared helpers (``benchmarks/common.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from common import find_aiperf


def test_a_relative_aiperf_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AIPerf runs with a temporary directory as its working directory, where the path the user
    # typed (``--aiperf .venv-aiperf/bin/aiperf``) names nothing.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "aiperf").write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    found = find_aiperf("bin/aiperf", anywhere=False)
    assert found == str(tmp_path / "bin" / "aiperf")
    assert find_aiperf("none", anywhere=False) is None
    with pytest.raises(SystemExit, match="'missing': no such file"):
        find_aiperf("missing", anywhere=False)
