"""Names shared by the light entry module (:mod:`pytest_streamguard.plugin`) and the runtime.

Standard library, pytest and the plugin's own light modules only: the entry module imports this
on every ``pytest`` start, with the plugin on or off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # Not imported at runtime (this module must stay cheap), so named as strings below; ruff
    # does not see string subscripts as uses.
    from pytest_streamguard.deadlines import Deadline  # noqa: F401
    from pytest_streamguard.guard import StreamGuard  # noqa: F401
    from pytest_streamguard.session import StreamGuardSession  # noqa: F401
    from pytest_streamguard.settings import Settings  # noqa: F401

SETTINGS_KEY = pytest.StashKey["Settings"]()
SESSION_KEY = pytest.StashKey["StreamGuardSession"]()
DEADLINE_KEY = pytest.StashKey["Deadline | None"]()
GUARD_KEY = pytest.StashKey["StreamGuard"]()
PLUGIN_NAME = "streamguard-session"

# The marker's name and registration line (validation is in pytest_streamguard.markers).
MARKER_NAME = "token_deadline"
MARKER_LINE = (
    "token_deadline(ttft=None, chunk=None, total=None, percentile=None): check every stream the "
    "test reads through pytest-streamguard: ttft bounds request-to-first-token, chunk bounds every "
    "gap between chunks (or the given percentile of gaps), total bounds the whole stream; seconds. "
    "A bare marker uses --streamguard-ttft and --streamguard-chunk. Needs --streamguard."
)
#: The module registered when ``--streamguard`` is on: fixtures, session and its hooks.
RUNTIME_MODULE = "pytest_streamguard.runtime"
#: The module registered when it is off: the same fixture names, each skipping its test.
OFF_MODULE = "pytest_streamguard.off"

SKIP_REASON = (
    "pytest-streamguard is off: run pytest with --streamguard to read streams and check deadlines"
)
FIXTURE_NAMES = frozenset(
    {
        "streamguard",
        "toxiproxy",
        "streamguard_target",
        "streamguard_toxiproxy_server",
        "make_streamguard",
        "make_streamguard_target",
    }
)
