"""docs/findings.md's table of thresholds is the code's: every numeric constant of the
findings' modules (and the probe's wait) is listed with its value, and nothing else is."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = (
    "buffered",
    "bursts",
    "loop",
    "capacity",
    "ends",
    "timeouts",
    "backpressure",
    "server",
    "own",
    "said",
    "interrupted",
)
ROW = re.compile(r"^\| [^|]+ \| `(?P<name>[A-Z_]+)` \| (?P<value>[^|]+) \| `(?P<module>[^`]+)` \|$")


def module(name: str) -> ModuleType:
    if name == "../probe":
        return importlib.import_module("pytest_streamguard.verdict.probe")
    return importlib.import_module(f"pytest_streamguard.verdict.findings.{name}")


def defined(mod: ModuleType) -> dict[str, float]:
    """The module's own public numeric constants (not those it imports)."""
    source = Path(str(mod.__file__)).read_text()
    return {
        name: value
        for name, value in vars(mod).items()
        if name.isupper()
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and f"\n{name} = " in source
    }


def test_the_table_of_thresholds_is_the_code() -> None:
    text = (ROOT / "docs" / "findings.md").read_text()
    rows = [m for line in text.splitlines() if (m := ROW.match(line))]
    documented = {(m["module"], m["name"]): m["value"].strip() for m in rows}
    in_code = {
        (family, name): value
        for family in FAMILIES
        for name, value in defined(module(family)).items()
    }
    in_code[("../probe", "PROBE_WAIT_S")] = defined(module("../probe"))["PROBE_WAIT_S"]
    assert set(documented) == set(in_code)
    for key, shown in documented.items():
        value = in_code[key]
        expected = "1/3" if abs(value - 1 / 3) < 1e-9 else f"{value:g}"
        assert shown == expected, (key, shown, value)
