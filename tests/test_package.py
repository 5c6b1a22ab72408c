"""The package installs as a pytest plugin."""

from importlib.metadata import entry_points

import pytest_streamguard


def test_plugin_entry_point_is_registered() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("streamguard") == "pytest_streamguard.plugin"


def test_version_is_exposed() -> None:
    assert pytest_streamguard.__version__ == "0.1.0"
