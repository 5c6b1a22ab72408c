"""The differential harness at a fixed seed: generated streams of every protocol with an
official Python client, read by the plugin (its format and ``auto``) and by that client, must
agree but where docs/protocols.md says they differ on purpose (``differential.DIVERGENCES``;
with the reader alone, ``client=none``, also ``READER_DIVERGENCES``).

Most streams are read in-process (both readers over httpx from one transport serving the
exact bytes); a sample is served over a loopback socket and through the embedded Toxiproxy.
``make verdict-fuzz N=... SEED=...`` runs the same harness at any size.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import differential
import pytest
from streamgen import PROTOCOLS, Transcript, generate

from pytest_streamguard.stream.client import StreamRecorder
from pytest_streamguard.stream.request import StreamRequest

SEED = 26
# Every choice the generator draws at this seed (each note of streamgen's transcripts, per
# protocol) has come up by the 157th stream; 250 drew none more. `make verdict-fuzz` goes deeper.
PER_PROTOCOL = 160
TYPED_PER_PROTOCOL = 40
HERE = Path(__file__).resolve().parent


def _report(tally: differential.Tally) -> str:
    shown = "\n".join(outcome.describe() for outcome in tally.undocumented[:10])
    return f"{tally.line()}\n{shown}"


def test_fixed_seed_streams_judged_agree_with_the_official_clients() -> None:
    """The plugin's verdict as ``client=auto`` rules it differs from the client's only where
    the plugin is stricter."""
    tally = differential.run(PROTOCOLS, PER_PROTOCOL, SEED)
    assert tally.streams == PER_PROTOCOL * len(PROTOCOLS)
    assert not tally.undocumented, _report(tally)
    assert "clean-cut" in tally.by_divergence, tally.by_divergence


def test_fixed_seed_streams_agree_with_the_official_clients() -> None:
    """The reader alone (``client=none``)."""
    tally = differential.run(PROTOCOLS, PER_PROTOCOL, SEED, judge="none")
    assert tally.streams == PER_PROTOCOL * len(PROTOCOLS)
    assert not tally.undocumented, _report(tally)
    # The generator does reach the documented differences (else the table is untested).
    assert {"clean-cut", "bom"} <= set(tally.by_divergence), tally.by_divergence
    # A reset or broken chunked body after the end was a divergence until the plugin read on
    # to the body's end as the clients do: it must not come back.
    assert "break-after-end" not in tally.by_divergence


def test_streams_from_the_sdks_typed_models_judged_agree_with_the_official_clients() -> None:
    """typedgen's streams (events the SDKs' own models declare, filled at random): the judged
    verdict differs from the client's only where the plugin is stricter."""
    tally = differential.run(PROTOCOLS, TYPED_PER_PROTOCOL, SEED, generator="typed")
    assert tally.streams == TYPED_PER_PROTOCOL * len(PROTOCOLS)
    assert not tally.undocumented, _report(tally)


def test_the_typed_generator_is_seeded_and_draws_every_member_of_the_unions() -> None:
    from anthropic.types import RawMessageStreamEvent
    from openai.types.responses import ResponseStreamEvent
    from typedgen import generate_typed, members

    # A typed stream costs tens of ms to build (the SDKs' models): 4 per protocol show the seed.
    one = [generate_typed(p, 5, i).body for p in PROTOCOLS for i in range(4)]
    assert one == [generate_typed(p, 5, i).body for p in PROTOCOLS for i in range(4)]
    assert one != [generate_typed(p, 6, i).body for p in PROTOCOLS for i in range(4)]
    assert generate_typed("tgi", 5, 0).generator == "typed"
    for protocol, union in (
        ("openai-responses", ResponseStreamEvent),
        ("anthropic", RawMessageStreamEvent),
    ):
        # At seed 1 the 59 members of the Responses union are all drawn by the 49th stream.
        drawn = {name for i in range(100) for name in generate_typed(protocol, 1, i).notes}
        every = {model.__name__ for model in members(union)}
        assert len(every) > 5, every
        assert every <= drawn, sorted(every - drawn)


def test_a_sample_over_a_socket_and_through_toxiproxy_agrees(toxiproxy_url: str) -> None:
    tally = differential.run(
        PROTOCOLS, 16, SEED + 1, served=16, proxied=8, toxiproxy_url=toxiproxy_url
    )
    assert not tally.undocumented, _report(tally)


def test_a_disagreement_is_reported_with_its_seed_and_transcript() -> None:
    """An undocumented disagreement names the seed, protocol and index that replay it, and
    carries the transcript's bytes."""
    transcript = generate("openai", 3, 7)
    outcome = differential.Outcome(
        transcript,
        "in-process format=openai",
        differential.Verdict(True, {"text": "a"}, "completed"),
        differential.Verdict(False, {"text": ""}, "APIError: boom"),
    )
    differential.classify(outcome)
    assert outcome.divergence is None
    text = outcome.describe()
    assert "protocol=openai seed=3 index=7" in text
    assert repr(transcript.body) in text
    assert generate("openai", 3, 7).body == transcript.body  # the seed replays it


def test_the_generator_is_seeded() -> None:
    one = [generate(p, 5, i).body for p in PROTOCOLS for i in range(20)]
    assert one == [generate(p, 5, i).body for p in PROTOCOLS for i in range(20)]
    assert one != [generate(p, 6, i).body for p in PROTOCOLS for i in range(20)]


def test_a_missing_client_names_the_package_to_install(tmp_path: Path) -> None:
    """With a client's module hidden, the command line says which package to install and
    exits 2 instead of crashing."""
    # A regular package named google, first on the path, hides the google-genai install.
    (tmp_path / "google").mkdir()
    (tmp_path / "google" / "__init__.py").write_text("")
    result = subprocess.run(
        [sys.executable, str(HERE / "differential.py"), "--n", "1", "--protocols", "gemini"],
        env={"PYTHONPATH": f"{tmp_path}:{HERE.parent}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gemini: its official client is not installed: pip install google-genai" in (
        result.stdout
    )
    assert result.stdout.strip().splitlines()[-1].startswith("streams=0 ")


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(SystemExit):
        differential.main(["--protocols", "grpc"])
    with pytest.raises(ValueError, match="expected one of openai"):
        generate("grpc", 0, 0)


def _sans_io(transcript: Transcript, fmt: str, pieces: list[bytes]) -> tuple[object, ...]:
    recorder = StreamRecorder(StreamRequest("POST", "http://replay.invalid/", format=fmt), "s")
    recorder.start()
    recorder.response(200, transcript.content_type)
    for piece in pieces:
        recorder.feed(piece, time.perf_counter_ns())
    recorder.eof()
    recorder.finish()
    trace = recorder.trace
    return trace.completed, trace.error_kind, tuple(trace.text_of(k) for k in differential.KINDS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_same_bytes_split_at_every_offset_read_the_same(protocol: str) -> None:
    """The plugin's verdict and text do not depend on where the network splits the body."""
    for index in range(2):
        transcript = generate(protocol, SEED, index)
        body = transcript.body
        for fmt in (protocol, "auto"):
            whole = _sans_io(transcript, fmt, [body])
            for offset in range(1, len(body)):
                split = _sans_io(transcript, fmt, [body[:offset], body[offset:]])
                assert split == whole, (fmt, offset, transcript.replay())


def test_a_generator_failure_names_the_seed_to_replay(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(protocol: str, seed: int, index: int) -> Transcript:
        raise ValueError("no such draw")

    monkeypatch.setattr(differential, "generate", broken)
    assert (
        differential.main(["--n", "1", "--seed", "7", "--protocols", "tgi", "--proxied", "0"]) == 1
    )
    out = capsys.readouterr().out.splitlines()
    assert "protocol=tgi seed=7 index=0" in out[0]
    assert "streamgen.generate('tgi', 7, 0)" in out[0]
    assert out[-1].startswith("streams=0 ")
