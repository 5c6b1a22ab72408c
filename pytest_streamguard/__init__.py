"""pytest-streamguard: deadlines for LLM token streams under injected network faults.

Everything a test or a conftest types is importable from here, and only from here: the
``streamguard`` fixture's handle and what it returns (traces, loads, findings, faults, the
ingress), the stream formats a test passes as ``format=`` and the types a format of its own
uses, the interface a client library of one's own implements to judge streams (``client=``),
and every exception a test may catch (:class:`StreamguardError` and its hierarchy, in
:mod:`pytest_streamguard.errors`). ``__all__`` lists them; ``tests/test_exported_members.py``
pins the list. The pytest plugin itself is :mod:`pytest_streamguard.plugin` (entry point
``streamguard``); the embedded Toxiproxy-API server, a program of its own, is
``python -m pytest_streamguard.toxiproxy_server``.

The names load on first access (PEP 562): pytest imports this package on every start through
the entry point, and the plugin's runtime (httpx, toxiproxy-python, ...) must not load unless
``--streamguard`` is on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_streamguard.errors import (
        DeadlineViolation,
        FaultsNotFired,
        FindingsFailed,
        FindingsUnchecked,
        IngressError,
        NeedsEmbeddedToxiproxy,
        ProfileError,
        ProtocolError,
        ReadyPathError,
        ServerError,
        SetupError,
        ShardStartError,
        StartupError,
        StreamError,
        StreamguardError,
        StreamguardFailure,
        ToxiproxyError,
    )
    from pytest_streamguard.faults.chunks import chosen
    from pytest_streamguard.faults.hops import Hop
    from pytest_streamguard.faults.inject import Faults
    from pytest_streamguard.faults.toxiproxy_client import ToxiproxyServer
    from pytest_streamguard.formats.anthropic import AnthropicFormat
    from pytest_streamguard.formats.base import Frame, Piece, Reading, StreamFormat
    from pytest_streamguard.formats.gemini import GeminiFormat
    from pytest_streamguard.formats.generic import NDJSONFormat, RawFormat, SSEFormat
    from pytest_streamguard.formats.ollama import OllamaFormat
    from pytest_streamguard.formats.openai import OpenAIChatFormat, OpenAIResponsesFormat
    from pytest_streamguard.formats.tgi import TGIFormat
    from pytest_streamguard.guard import StreamGuard
    from pytest_streamguard.headroom.result import Headroom, HeadroomLevel
    from pytest_streamguard.judge.base import Assembly, ClientJudge, Conclusion, Output
    from pytest_streamguard.judge.chunks import read_chunks
    from pytest_streamguard.judge.registry import register_judge
    from pytest_streamguard.judge.replay import Replay
    from pytest_streamguard.load import LoadPlan, LoadResult
    from pytest_streamguard.report.records import TestRecord
    from pytest_streamguard.services.app import Target
    from pytest_streamguard.services.ingress import Ingress
    from pytest_streamguard.stream.recorded import Recorded
    from pytest_streamguard.stream.trace import Chunk, FaultRecord, StackStamps, StreamTrace
    from pytest_streamguard.verdict.deadlines import Deadline, Violation
    from pytest_streamguard.verdict.findings import (
        Finding,
        findings_of,
        group_findings,
        not_cancelled,
        target_gauges,
        trace_findings,
    )
    from pytest_streamguard.verdict.stats import percentile

__version__ = "0.1.0"

# public name -> the module that defines it (the one place the name is looked up)
_PUBLIC = {
    # the test's handle, and the app under test it streams from
    "StreamGuard": "guard",
    "Target": "services.app",
    # a stack's hop (streamguard.hop(NAME)), and a stream's stamps at each hop
    "Hop": "faults.hops",
    "StackStamps": "stream.trace",
    # what one stream looked like
    "Chunk": "stream.trace",
    "FaultRecord": "stream.trace",
    "StreamTrace": "stream.trace",
    # deadlines, findings and statistics
    "Deadline": "verdict.deadlines",
    "Violation": "verdict.deadlines",
    "Finding": "verdict.findings",
    "findings_of": "verdict.findings",
    "group_findings": "verdict.findings",
    "not_cancelled": "verdict.findings",
    "target_gauges": "verdict.findings",
    "trace_findings": "verdict.findings",
    "percentile": "verdict.stats",
    # faults, the Toxiproxy server they act on, and the nginx ingress
    "Faults": "faults.inject",
    "chosen": "faults.chunks",
    "ToxiproxyServer": "faults.toxiproxy_client",
    "Ingress": "services.ingress",
    # how far a stream is from breaking (streamguard.headroom())
    "Headroom": "headroom.result",
    "HeadroomLevel": "headroom.result",
    # loads of many streams
    "LoadPlan": "load",
    "LoadResult": "load",
    # the stream formats passed as format=, and what a format of one's own is made of
    "StreamFormat": "formats.base",
    "Frame": "formats.base",
    "Piece": "formats.base",
    "Reading": "formats.base",
    "SSEFormat": "formats.generic",
    "NDJSONFormat": "formats.generic",
    "RawFormat": "formats.generic",
    "OpenAIChatFormat": "formats.openai",
    "OpenAIResponsesFormat": "formats.openai",
    "AnthropicFormat": "formats.anthropic",
    "GeminiFormat": "formats.gemini",
    "OllamaFormat": "formats.ollama",
    "TGIFormat": "formats.tgi",
    # the client judge: a stream's recorded response replayed into a client library, and the
    # interface a client of one's own implements to judge (docs/protocols.md)
    "ClientJudge": "judge.base",
    "Conclusion": "judge.base",
    "Output": "judge.base",
    "Assembly": "judge.base",
    "Recorded": "stream.recorded",
    "Replay": "judge.replay",
    "register_judge": "judge.registry",
    "read_chunks": "judge.chunks",
    # a test's record in the reports
    "TestRecord": "report.records",
    # every exception a test may catch (the hierarchy is in errors.py's docstring)
    "StreamguardError": "errors",
    "StreamguardFailure": "errors",
    "DeadlineViolation": "errors",
    "FindingsFailed": "errors",
    "FindingsUnchecked": "errors",
    "FaultsNotFired": "errors",
    "SetupError": "errors",
    "StartupError": "errors",
    "ReadyPathError": "errors",
    "IngressError": "errors",
    "ShardStartError": "errors",
    "ToxiproxyError": "errors",
    "ProfileError": "errors",
    "NeedsEmbeddedToxiproxy": "errors",
    "StreamError": "errors",
    "ServerError": "errors",
    "ProtocolError": "errors",
}

__all__ = [
    "AnthropicFormat",
    "Assembly",
    "Chunk",
    "ClientJudge",
    "Conclusion",
    "Deadline",
    "DeadlineViolation",
    "FaultRecord",
    "Faults",
    "FaultsNotFired",
    "Finding",
    "FindingsFailed",
    "FindingsUnchecked",
    "Frame",
    "GeminiFormat",
    "Headroom",
    "HeadroomLevel",
    "Hop",
    "Ingress",
    "IngressError",
    "LoadPlan",
    "LoadResult",
    "NDJSONFormat",
    "NeedsEmbeddedToxiproxy",
    "OllamaFormat",
    "OpenAIChatFormat",
    "OpenAIResponsesFormat",
    "Output",
    "Piece",
    "ProfileError",
    "ProtocolError",
    "RawFormat",
    "Reading",
    "ReadyPathError",
    "Recorded",
    "Replay",
    "SSEFormat",
    "ServerError",
    "SetupError",
    "ShardStartError",
    "StackStamps",
    "StartupError",
    "StreamError",
    "StreamFormat",
    "StreamGuard",
    "StreamTrace",
    "StreamguardError",
    "StreamguardFailure",
    "TGIFormat",
    "Target",
    "TestRecord",
    "ToxiproxyError",
    "ToxiproxyServer",
    "Violation",
    "__version__",
    "chosen",
    "findings_of",
    "group_findings",
    "not_cancelled",
    "percentile",
    "read_chunks",
    "register_judge",
    "target_gauges",
    "trace_findings",
]


def __getattr__(name: str) -> Any:
    """The public name from its module, imported on first access.

    Not cached here: the module's own entry in ``sys.modules`` is the one source, so a test
    process that drops and re-imports the plugin's modules (pytester's in-process runs) gets
    the class the plugin now raises, never the one of an earlier run."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_streamguard' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pytest_streamguard.{module}"), name)


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
