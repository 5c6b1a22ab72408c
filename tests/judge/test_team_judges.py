"""A function of the team's own as judge (``client=<function>``): what it yields is the output,
what it raises the verdict; bad input gets a clear error or a bounded wait."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from held_out import OPENAI
from test_held_out import recorded_of

from pytest_streamguard.judge import JUDGES, REPLAY_URL, check_client, judge_for, rule
from pytest_streamguard.judge import team as team_module
from pytest_streamguard.stream.trace import Chunk, StreamTrace

AZURE, NULL_CHOICES = OPENAI[0], OPENAI[1]


def first_choice_loop(http: httpx.Client) -> Iterator[str]:
    """The loop of the openai client's README: the first choice's delta of every chunk."""
    import openai  # here, not at collection, where it costs every xdist worker a second

    client = openai.OpenAI(base_url=REPLAY_URL, api_key="x", http_client=http, max_retries=0)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "hi"}
    ]
    for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
        if chunk.choices:
            yield chunk.choices[0].delta.content or ""


@pytest.fixture
def named() -> Iterator[str]:
    name = check_client(first_choice_loop)
    yield name
    JUDGES.pop(name)


def test_the_teams_function_reads_the_replay_and_its_text_is_the_output(named: str) -> None:
    judge = judge_for(named, "openai")
    assert judge is not None
    said = judge.judge(recorded_of(NULL_CHOICES))
    assert (said.completed, said.text_of("text"), said.defect) == (True, "Hi", None)
    # It tells no end reason: the reader's is no difference.
    trace = StreamTrace("s", "POST", "http://h/", "openai", 0)
    trace.completed, trace.end_reason = True, "stop"
    trace.chunks = [Chunk(0, 5, 5, 2, "Hi")]
    rule(trace, said)
    assert trace.reader_agrees


def test_what_the_teams_loop_raises_is_the_verdict(named: str) -> None:
    judge = judge_for(named, "openai")
    assert judge is not None
    said = judge.judge(recorded_of(AZURE))
    # Azure's filter chunk has no delta: the team's loop crashes there, as it would in production.
    assert said.error == "AttributeError: 'NoneType' object has no attribute 'content'"
    assert said.defect is None
    assert not said.completed


def test_a_function_that_cannot_take_the_client_is_refused_clearly() -> None:
    def two(http: httpx.Client, model: str) -> Iterator[str]:
        yield model

    with pytest.raises(ValueError, match=r"takes one argument .* missing a required argument"):
        check_client(two)
    with pytest.raises(ValueError, match=r"client= 'opnai': expected one of auto, none, openai"):
        check_client("opnai")


def test_a_function_that_never_returns_is_waited_on_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def stuck(http: httpx.Client) -> Iterator[str]:
        release.wait(30)
        yield "late"

    monkeypatch.setattr(team_module, "REPLAY_TIMEOUT_S", 0.2)
    name = check_client(stuck)
    try:
        said = JUDGES[name].judge(recorded_of(NULL_CHOICES))
    finally:
        release.set()
        JUDGES.pop(name)
    assert said.defect == f"{name} did not return within 0.2 s"
    assert not said.completed
