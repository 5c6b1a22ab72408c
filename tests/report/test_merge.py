"""Merging reports (``python -m pytest_streamguard.report A.json B.json --json merged.json``):
input it cannot merge is a clear error with exit status 2 and no merged file (the merge of two
real runs is in tests/report/test_merge_reports.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_streamguard.report.cli import main


def test_merge_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": "pytest-streamguard", "version": 1, "tests": []}))
    assert main([str(good), str(good), "--json", str(tmp_path / "m.json")]) == 2
    assert f"error: {good} given more than once" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main([str(good), str(bad), "--json", str(tmp_path / "m.json")]) == 2
    assert f"error: {bad} is not a pytest-streamguard report" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
