"""Helpers shared by the plugin's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

#: A Node.js gateway (node:http, an OpenAI-style SSE route, its own listening line).
NODE_GATEWAY = Path(__file__).resolve().parent / "node_gateway.js"
#: A user's test of that gateway's stream.
NODE_STREAM_TEST = """
import pytest


@pytest.mark.token_deadline(ttft=5.0, chunk=5.0)
def test_gateway_streams(streamguard):
    trace = streamguard.stream("/v1/chat/completions", json={"stream": True}, format="openai")
    assert trace.completed, trace.error
    assert trace.text == "hello from node"
"""
INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
#: Libraries that cost an xdist worker up to seconds to import (torch with transformers 3 s, an
#: SDK up to 1 s): the suite imports them where a test uses them, never at collection.
HEAVY = ("torch", "transformers", "openai", "anthropic", "google.genai", "ollama", "ray")
#: Those of :data:`HEAVY` a process had imported when its collection finished (tests/conftest.py).
IMPORTED_AT_COLLECTION = pytest.StashKey[list[str]]()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def error_section(lines: list[str], title: str) -> list[str]:
    """The lines of the report section whose ``___ title ___`` header contains ``title``, up to
    the next section or summary header."""
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and title in line)
    end = start + 1
    while end < len(lines) and not lines[end].startswith(("___", "===")):
        end += 1
    return lines[start + 1 : end]


def streamguard_runner(
    pytester: pytest.Pytester, toxiproxy_url: str, target_url: str, *, subprocess: bool = False
) -> Callable[..., pytest.RunResult]:
    """Run pytest with the plugin on, against ``target_url`` through the Toxiproxy at
    ``toxiproxy_url``: in-process, or in a subprocess as a user's own run would be."""
    runpytest = pytester.runpytest_subprocess if subprocess else pytester.runpytest

    def run_pytest(*args: str) -> pytest.RunResult:
        return runpytest(
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-url",
            target_url,
            "-p",
            "no:cacheprovider",
            *args,
        )

    return run_pytest
