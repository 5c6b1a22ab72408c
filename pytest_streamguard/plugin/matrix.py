"""The ``streamguard_matrix`` marker: run one test once per named fault profile.

``@pytest.mark.streamguard_matrix("none", "latency-200", "cut-mid-stream")`` parametrises the
test's ``streamguard`` fixture indirectly with those profiles (``pytest_generate_tests``), so
each item's id is the profile's name (``test_x[latency-200]``). The runtime applies the
item's profile to its proxy after the fixtures are set up and before the body, and the
fixture's teardown undoes it with the test's other faults; the body sees it as
``streamguard.profile``. An unknown name is a collection error that lists the known ones.

This module is a plugin of its own, registered by the entry module; it imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_streamguard.common.names import MATRIX_MARKER_NAME as MARKER_NAME
from pytest_streamguard.errors import ProfileError
from pytest_streamguard.faults.profiles import Profile, load_profiles

PROFILES_KEY = pytest.StashKey[dict[str, Profile]]()
PLUGIN_NAME = "streamguard-matrix"
FIXTURE = "streamguard"


def _profiles_dir(config: pytest.Config) -> Path | None:
    """The user's profile directory: the ini key, relative to the ini file's directory."""
    ini = str(config.getini("streamguard_profiles") or "")
    if not ini:
        return None
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    return base / ini


def configure(config: pytest.Config) -> None:
    """Load the profiles once (a bad file is a usage error) and register this plugin."""
    try:
        config.stash[PROFILES_KEY] = load_profiles(_profiles_dir(config))
    except ProfileError as exc:
        raise pytest.UsageError(f"streamguard_profiles: {exc}") from None
    config.pluginmanager.register(MatrixPlugin(config), PLUGIN_NAME)


def profile_names(mark: pytest.Mark, known: dict[str, Profile]) -> list[str]:
    """The marker's profile names, checked; ``pytest.fail`` (a collection error) otherwise."""
    listing = ", ".join(sorted(known))
    if mark.kwargs:
        pytest.fail(
            f"streamguard_matrix takes profile names only, got keyword argument(s) "
            f"{', '.join(sorted(mark.kwargs))}; known profiles: {listing}",
            pytrace=False,
        )
    names = list(mark.args)
    if not names or not all(isinstance(n, str) for n in names):
        pytest.fail(
            f"streamguard_matrix{tuple(names)!r}: expected one or more profile names; "
            f"known profiles: {listing}",
            pytrace=False,
        )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        pytest.fail(
            f"streamguard_matrix names {', '.join(duplicates)} more than once", pytrace=False
        )
    unknown = [n for n in names if n not in known]
    if unknown:
        pytest.fail(
            f"streamguard_matrix: unknown profile(s) {', '.join(map(repr, unknown))}; "
            f"known profiles: {listing}",
            pytrace=False,
        )
    return names


class MatrixPlugin:
    """Expands marked tests into one item per profile."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrise the ``streamguard`` fixture of a marked test with its profiles."""
        mark = metafunc.definition.get_closest_marker(MARKER_NAME)
        if mark is None:
            return
        known = self.config.stash[PROFILES_KEY]
        names = profile_names(mark, known)
        if FIXTURE not in metafunc.fixturenames:
            pytest.fail(
                f"{metafunc.definition.nodeid}: streamguard_matrix needs the streamguard "
                "fixture (the profile is applied to its proxy)",
                pytrace=False,
            )
        metafunc.parametrize(FIXTURE, [known[n] for n in names], ids=names, indirect=True)


def item_profile(item: pytest.Item) -> Profile | None:
    """The profile a matrix item runs under; None for any other item."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(FIXTURE) if callspec is not None else None
    return value if isinstance(value, Profile) else None
