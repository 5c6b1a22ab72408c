"""Names shared by the light entry module (:mod:`pytest_streamguard.plugin`) and the runtime.

Standard library, pytest and the plugin's own light modules only: the entry module imports this
on every ``pytest`` start, with the plugin on or off.
"""

from __future__ import annotations

from collections.abc import Iterable

# The marker's name and registration line (validation is in pytest_streamguard.plugin.markers).
MARKER_NAME = "token_deadline"
MARKER_LINE = (
    "token_deadline(ttft=None, chunk=None, total=None, percentile=None, long=False): check every "
    "stream the test reads through pytest-streamguard: ttft bounds request-to-first-token, chunk "
    "bounds every gap between chunks (or the given percentile of gaps), total bounds the whole "
    "stream; seconds (a bound above 60 s needs long=True). "
    "A bare marker uses --streamguard-ttft and --streamguard-chunk. Needs --streamguard."
)
# The fault-matrix marker (expansion is in pytest_streamguard.plugin.matrix).
MATRIX_MARKER_NAME = "streamguard_matrix"
MATRIX_MARKER_LINE = (
    "streamguard_matrix(*profiles): run the test once per named fault profile (built-in: "
    "none, latency-200, jitter-150, mobile-3g, slow-reader-2kbps, stall-1s, cut-mid-stream, "
    "reset, down; or *.json files in the streamguard_profiles directory), each item's id the "
    "profile's name; the profile is applied before the body and undone after, and "
    "streamguard.profile shows it. Needs the streamguard fixture and --streamguard."
)
# The headroom gate (validation in pytest_streamguard.plugin.markers; the check after the body
# in pytest_streamguard.plugin.session).
HEADROOM_MARKER_NAME = "headroom"
HEADROOM_MARKER_LINE = (
    "headroom(vary='streams', at_least=None): fail the test when the headroom its body measured "
    "with streamguard.headroom(vary=...) is below at_least (in that vary's unit: streams, "
    "requests/s, ms, KB/s or s; for bandwidth, above it). vary: streams, rate, latency, jitter, "
    "bandwidth or freeze. Needs the streamguard fixture and --streamguard."
)
#: The module registered when ``--streamguard`` is on: fixtures, session and its hooks.
RUNTIME_MODULE = "pytest_streamguard.plugin.runtime"
#: The module registered when it is off: the same fixture names, each skipping its test.
OFF_MODULE = "pytest_streamguard.plugin.off"

SKIP_REASON = (
    "pytest-streamguard is off: run pytest with --streamguard to read streams and check deadlines"
)
FIXTURE_NAMES = frozenset(
    {
        "streamguard",
        "toxiproxy",
        "streamguard_target",
        "streamguard_stack",
        "streamguard_toxiproxy_server",
        "make_streamguard",
        "make_streamguard_target",
    }
)

#: Every finding's name and what it means, in the order findings are listed; a test can gate
#: on them (``fail_on``). The patterns themselves are :mod:`pytest_streamguard.verdict.findings`.
KNOWN: dict[str, str] = {
    "server_error": "a hop wrote a traceback or an error-level line while streams were open "
    "(the likely cause where a stream beside it ended early)",
    "buffered": "most of the stream's chunks arrived in one or two reads at its end",
    "blocked_loop": "concurrent streams stalled in the same windows, or their heads or first "
    "tokens arrived in a staircase, or all at once after a silence (and the probe, when it "
    "ran, waited with them)",
    "cold_start": "the first stream's TTFT was far above the later streams'",
    "idle_cut": "the stream was cut after a silence of a round length (a read timeout)",
    "held_open": "the body stayed open after the protocol's end",
    "backpressure": "the server's writes waited while a throttled client read slowly",
    "not_cancelled": "generation went on after the client was cut",
    "queued": "streams waited for a slot of a full server while the probe's answers came at "
    "once (capacity, not blame)",
    "bursts": "the stream's chunks came in groups of a fixed size or at a fixed period (a hop "
    "that flushes by size or by timer)",
    "total_timeout": "every stream was cut, still flowing, at the same time after its request "
    "(a hop's write or total timeout)",
    "own_fault": "a gap another finding would have blamed on the app or a hop lay in the window "
    "of a fault the plugin itself applied (evidence, never a cause)",
    "probe_interrupted": "a completed stream ended while the probe waited for it (a probe path "
    "that takes the model's lock can end a stream early)",
}


def parse_fail_on(value: str | Iterable[str] | None, *, where: str) -> tuple[str, ...]:
    """The finding names of a ``fail_on`` setting (comma-separated text or a list).

    Raises ValueError naming the unknown ones and listing the known ones."""
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = [str(p).strip() for p in parts if str(p).strip()]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(
            f"{where}: unknown finding(s) {', '.join(unknown)}; known findings: {', '.join(KNOWN)}"
        )
    return tuple(dict.fromkeys(names))
