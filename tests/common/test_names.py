"""The names every family shares (common/names.py): findings a test can gate on."""

from __future__ import annotations

import pytest

from pytest_streamguard.common.names import KNOWN, parse_fail_on


def test_fail_on_keeps_known_names_once_in_the_order_given() -> None:
    assert parse_fail_on(" buffered, idle_cut,buffered ,", where="x") == ("buffered", "idle_cut")
    assert parse_fail_on(["queued"], where="x") == ("queued",)
    assert parse_fail_on(None, where="x") == ()


def test_an_unknown_finding_names_itself_where_it_came_from_and_every_known_one() -> None:
    with pytest.raises(ValueError, match="marker fail_on: unknown finding") as raised:
        parse_fail_on("buffered,bufferd", where="marker fail_on")
    message = str(raised.value)
    assert "bufferd" in message
    assert message.endswith(", ".join(KNOWN))


def test_every_known_finding_says_what_it_means() -> None:
    assert all(name.isidentifier() and len(meaning) > 20 for name, meaning in KNOWN.items())
