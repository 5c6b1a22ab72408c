"""pytest entry point for pytest-streamguard (``pytest11: streamguard``).

Kept thin: it wires pytest hooks to the modules that own each concept.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--streamguard`` switch."""
    group = parser.getgroup("streamguard", "token-stream deadlines under network faults")
    group.addoption(
        "--streamguard",
        action="store_true",
        default=False,
        help="Turn pytest-streamguard on: start the target and Toxiproxy, check stream deadlines.",
    )
