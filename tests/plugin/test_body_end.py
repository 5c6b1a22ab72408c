"""A body held open after its stream's end fails the user's test, naming it, through a pytester
run of the plugin (how the client reads a body's end, beside the ``openai`` client, is in
tests/stream/test_client_body_end.py)."""

from __future__ import annotations

import pytest

HELD_OPEN_TEST = """
import pytest

@pytest.mark.token_deadline(ttft=1.0, chunk=1.0)
def test_held_open(streamguard):
    body = {"max_new_tokens": 5, "interval_s": 0.01, "stream": True, "hold_open_s": 3,
            "drop_done": True}
    trace = streamguard.stream("/v1/completions", json=body, format="openai")
    assert trace.held_open_s is not None
"""


def test_a_held_open_body_fails_the_users_test_naming_it(
    pytester: pytest.Pytester,
    run,  # type: ignore[no-untyped-def]
) -> None:
    pytester.makepyfile(test_held=HELD_OPEN_TEST)
    result = run("-q")
    result.assert_outcomes(failed=1)
    # chunk=1.0 gives a read limit of 2 s: the body, held open 3 s, is still open when it runs
    # out, about 2 s after the end (the real time, not a capped wait).
    result.stdout.fnmatch_lines(
        [
            "*body held open [12].* s after the stream's end*",
            "*the body was still open [12].* s after the openai stream's end when the read limit*",
        ]
    )
