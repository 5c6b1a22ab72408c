"""Names shared by the light entry module (:mod:`pytest_streamguard.plugin`) and the runtime.

Standard library, pytest and the plugin's own light modules only: the entry module imports this
on every ``pytest`` start, with the plugin on or off.
"""

from __future__ import annotations

# The marker's name and registration line (validation is in pytest_streamguard.markers).
MARKER_NAME = "token_deadline"
MARKER_LINE = (
    "token_deadline(ttft=None, chunk=None, total=None, percentile=None, long=False): check every "
    "stream the test reads through pytest-streamguard: ttft bounds request-to-first-token, chunk "
    "bounds every gap between chunks (or the given percentile of gaps), total bounds the whole "
    "stream; seconds (a bound above 60 s needs long=True). "
    "A bare marker uses --streamguard-ttft and --streamguard-chunk. Needs --streamguard."
)
# The fault-matrix marker (expansion is in pytest_streamguard.matrix).
MATRIX_MARKER_NAME = "streamguard_matrix"
MATRIX_MARKER_LINE = (
    "streamguard_matrix(*profiles): run the test once per named fault profile (built-in: "
    "none, latency-200, jitter-150, mobile-3g, slow-reader-2kbps, stall-1s, cut-mid-stream, "
    "reset, down; or *.json files in the streamguard_profiles directory), each item's id the "
    "profile's name; the profile is applied before the body and undone after, and "
    "streamguard.profile shows it. Needs the streamguard fixture and --streamguard."
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
