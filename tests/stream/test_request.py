"""The request and read limits of a test's stream (stream/request.py), and the names that moved
there from stream/client.py."""

from __future__ import annotations

import pytest

from pytest_streamguard.stream.request import ReadLimits, read_limits, stream_url
from pytest_streamguard.verdict.deadlines import Deadline


def test_read_timeout_bounds_the_first_token_and_each_gap() -> None:
    limits = read_limits(2, Deadline(ttft=0.1), 30.0)
    assert limits == ReadLimits(first=2.0, gap=2.0, total=30.0)
    assert isinstance(limits.first, float)


def test_without_read_timeout_the_deadline_sets_the_limits() -> None:
    deadline = Deadline(ttft=0.5, chunk=0.2, total=3.0)
    assert read_limits(None, deadline, 30.0) == ReadLimits.for_deadline(deadline, 30.0)
    assert read_limits(None, None, 12.0) == ReadLimits(total=12.0)


@pytest.mark.parametrize("bad", [0, -1, True, "5"])
def test_a_bad_read_timeout_names_what_is_accepted(bad: object) -> None:
    with pytest.raises(ValueError, match=r"expected a number of seconds > 0"):
        read_limits(bad, None, 30.0)  # type: ignore[arg-type]


def test_a_stream_path_must_be_absolute() -> None:
    assert stream_url("http://127.0.0.1:9", "/generate") == "http://127.0.0.1:9/generate"
    with pytest.raises(ValueError, match=r"stream path 'generate' must start with '/'"):
        stream_url("http://127.0.0.1:9", "generate")
