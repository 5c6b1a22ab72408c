"""Module paths and names that moved keep importing, with a :class:`DeprecationWarning`.

The documentation once showed names by their module path (``pytest_streamguard.target.app``,
``pytest_streamguard.plugin.display``), so a user's conftest may import them there. Each old
module path resolves to the module that now holds it (the same module object, so a class has one
identity wherever it is imported from), and each name that moved out of a module is still found
there. Everything a user types is importable from :mod:`pytest_streamguard` itself; import it
from there.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: Old module path (and everything under it) -> where it lives now.
MOVED_MODULES = {
    "pytest_streamguard.target": "pytest_streamguard.services",
    "pytest_streamguard.plugin.display": "pytest_streamguard.common.display",
    "pytest_streamguard.plugin.names": "pytest_streamguard.common.names",
    "pytest_streamguard.load.transport": "pytest_streamguard.stream.transport",
}
#: (module, name) -> the module that now defines the name.
MOVED_NAMES = {
    ("pytest_streamguard.faults.inject", "FaultsNotFired"): "pytest_streamguard.errors",
    ("pytest_streamguard.plugin.session", "FindingsFailed"): "pytest_streamguard.errors",
    **{
        ("pytest_streamguard.stream.client", name): "pytest_streamguard.stream.request"
        for name in (
            "DEFAULT_READ_LIMIT",
            "EXPECTED_OUTCOMES",
            "SLOW_READER_MIN_RCVBUF",
            "SLOW_READER_RCVBUF_SECONDS",
            "read_limit",
            "slow_reader_rcvbuf",
        )
    },
    ("pytest_streamguard.stream.client", "EMPTY_HINT"): "pytest_streamguard.stream.endings",
    ("pytest_streamguard.plugin.matrix", "matrix_test"): "pytest_streamguard.report.recording",
    (
        "pytest_streamguard.plugin.session",
        "CLIENT_DELAY_WARN_S",
    ): "pytest_streamguard.report.timing",
    ("pytest_streamguard.plugin.session", "client_delay_lines"): "pytest_streamguard.report.timing",
    ("pytest_streamguard.plugin.session", "stamp_source_lines"): "pytest_streamguard.report.timing",
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(
        f"{old} moved to {new}; import it from pytest_streamguard (or {new})",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def new_module_name(fullname: str) -> str | None:
    """Where the module once named ``fullname`` lives now, or None if it did not move."""
    for old, new in MOVED_MODULES.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


def moved_name(module: str, name: str) -> object:
    """A module's ``__getattr__``: the name that moved out of ``module``, with a warning."""
    home = MOVED_NAMES.get((module, name))
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    # Above: _warn, this function, the module's __getattr__, then the importing code.
    _warn(f"{module}.{name}", f"{home}.{name}", stacklevel=4)
    return getattr(importlib.import_module(home), name)


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module that now holds it (no second copy of the code)."""

    def __init__(self, old: str, new: str) -> None:
        self.old = old
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new, stacklevel=3)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old name's spec on the module; the module keeps its own.
        module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_module_name(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): ahead of the path finder, which would
    otherwise load an old submodule path a second time from the new package's folder."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
