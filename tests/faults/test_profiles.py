"""Profile files (``faults/profiles.py``): a bad file is named with what is accepted, and the
repository's toxiproxy/profiles/ files are the built-in profiles made of toxics alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_streamguard.faults.profiles import BUILTIN, load_file

REPO = Path(__file__).resolve().parents[2]
PROFILE_FILES = REPO / "toxiproxy" / "profiles"


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("not json", "not JSON"),
        ('{"toxics": [], "extra": 1}', "unknown key(s) extra"),
        ('[{"type": "latency", "stream": "sideways"}]', "toxic 1 has stream 'sideways'"),
        ('[{"type": "latency", "attributes": {"latency": -1}}]', "latency=-1, not an integer"),
        ('[{"type": "bandwidth", "attributes": {"speed": 1}}]', "unknown attribute(s) speed"),
        ('[{"type": "timeout", "toxicity": 2}]', "toxicity 2"),
        ('"latency"', "the toxics are str, not a list"),
    ],
)
def test_bad_profile_file_names_the_file_and_what_is_accepted(
    tmp_path: Path, content: str, what: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="a profile file is JSON") as info:
        load_file(path)
    assert str(path) in str(info.value)
    assert what in str(info.value)


def test_profile_files_in_the_repository_match_the_built_ins() -> None:
    files = sorted(PROFILE_FILES.glob("*.json"))
    # Every built-in made of toxics alone ships as a file a real toxiproxy-server setup loads.
    expected = sorted(name for name, p in BUILTIN.items() if p.toxics and not p.faults)
    assert [f.stem for f in files] == expected
    for path in files:
        profile = load_file(path)
        assert profile.toxics == BUILTIN[path.stem].toxics, path
