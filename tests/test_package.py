"""The package installs as a pytest plugin, and its wheel holds only what it should."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import pytest_streamguard
from pytest_streamguard.services.app import bundled_target_root

ROOT = Path(__file__).resolve().parents[1]


def test_plugin_entry_point_is_registered() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("streamguard") == "pytest_streamguard.plugin"


def test_version_is_exposed() -> None:
    assert pytest_streamguard.__version__ == "0.1.0"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The project's wheel, built from this checkout as pip builds it for an install."""
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("pytest_streamguard-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_has_no_top_level_name_but_the_plugins(wheel: zipfile.ZipFile) -> None:
    # A top-level `target_app` would collide with any user module of that name.
    top = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert top == {"pytest_streamguard", "pytest_streamguard-0.1.0.dist-info"}


def test_wheel_carries_the_bundled_target_inside_the_plugin(wheel: zipfile.ZipFile) -> None:
    shipped = {
        name.removeprefix("pytest_streamguard/_bundled/")
        for name in wheel.namelist()
        if name.startswith("pytest_streamguard/_bundled/") and name.endswith(".py")
    }
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "target_app").rglob("*.py")}
    assert shipped == source
    assert "pytest_streamguard/py.typed" in wheel.namelist()


def test_wheel_requires_no_test_only_package_without_an_extra(wheel: zipfile.ZipFile) -> None:
    # pytest-asyncio in a user's environment adds its own notices to every plain run.
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(wheel.read(metadata).decode())
    plain = {
        re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()
        for requirement in message.get_all("Requires-Dist") or []
        if "extra ==" not in requirement
    }
    assert "pytest" in plain
    assert not plain & {"pytest-asyncio", "pytest-xdist", "torch", "transformers"}


def test_the_installed_plugin_finds_and_runs_its_bundled_target(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    # The wheel's files as an install lays them out, imported ahead of this checkout.
    site = tmp_path / "site-packages"
    wheel.extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pytest_streamguard.services.app import bundled_target_root as r; print(r())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    root = Path(where.stdout.strip())
    assert root == site / "pytest_streamguard" / "_bundled"
    # Started as the plugin starts it: -P, and only that folder names the module.
    probe = subprocess.run(
        [sys.executable, "-P", "-c", "import target_app.cli; print(target_app.cli.__file__)"],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert Path(probe.stdout.strip()) == root / "target_app" / "cli.py"


def test_streamguard_target_runs_the_bundled_target_from_anywhere(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    (entry_points_txt,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    scripts = wheel.read(entry_points_txt).decode()
    assert "streamguard-target = pytest_streamguard.services.app:main" in scripts
    site = tmp_path / "site-packages"
    wheel.extractall(site)
    # A user's own `target_app` in the working directory must not stand in for the bundled one.
    decoy = tmp_path / "work" / "target_app"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("")
    (decoy / "__main__.py").write_text("print('decoy target_app')\n")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pytest_streamguard.services.app import main; "
            "sys.exit(main(['--help']))",
        ],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=decoy.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Streaming transformers target for pytest-streamguard." in result.stdout
    assert result.stdout.startswith("usage: streamguard-target ")
    assert "--allow-fault-knobs" in result.stdout
    assert "decoy" not in result.stdout


def test_a_checkout_starts_its_own_target_app() -> None:
    # In this source checkout (an editable install), the plugin starts the repository's
    # target_app/, so an edit there is what the next run serves.
    assert bundled_target_root() == ROOT
