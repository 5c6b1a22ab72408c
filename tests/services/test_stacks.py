"""A stack: a gateway in front of a model server, both started by the plugin from the ini, with
faults on the inner hop (``streamguard.hop("model").faults``) that land, fire, name their hop
in every violation, and are gone by the next test; and the errors a bad stack gets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import error_section, pid_alive
from polling import wait_until
from served import EXAMPLES, STREAM_APP

GATEWAY = EXAMPLES / "stack" / "gateway.py"
# A team's chat server whose --incident blocked_loop calls time.sleep in its async generator.
CHAT_APP = Path(__file__).resolve().parents[1] / "confusion" / "apps" / "starlette_chat.py"


def stack_ini(
    *,
    buffer: bool = False,
    drop_ids: bool = False,
    gateway: str = "",
    extra: str = "",
    model: str = str(STREAM_APP),
) -> str:
    """An ini that starts a model server (``model``: its script and flags, the example's by
    default), then the example gateway in front of it (``gateway``: more of its flags)."""
    flag = (" --buffer" if buffer else "") + (" --drop-ids" if drop_ids else "") + gateway
    return (
        "[pytest]\n"
        "asyncio_default_fixture_loop_scope = function\n"
        "streamguard_ready_path = /readyz\n"
        "streamguard_services =\n"
        f"    model = {sys.executable} {model} --port {{port}}\n"
        f"    gateway = {sys.executable} {GATEWAY} --port {{port}} --upstream {{model}}{flag}\n"
        f"{extra}"
    )


def run_stack(pytester: pytest.Pytester, toxiproxy_url: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--streamguard",
        "--streamguard-toxiproxy",
        toxiproxy_url,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *args,
    )


CHAT = '{"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_new_tokens": 8}'


def test_the_example_stack_runs_from_its_ini(pytester: pytest.Pytester, toxiproxy_url: str) -> None:
    """examples/stack as a user's project: its pytest.ini starts both services, and its inner
    cut lands, fires (under --streamguard-strict-faults) and is gone by the next test."""
    shutil.copy(STREAM_APP, pytester.path / "stream_app.py")
    shutil.copytree(EXAMPLES / "stack", pytester.path / "stack", ignore=_bytecode)
    report = pytester.path / "report.json"
    result = run_stack(
        pytester,
        toxiproxy_url,
        "-c",
        "stack/pytest.ini",
        "--rootdir",
        "stack",
        "--streamguard-strict-faults",
        f"--streamguard-json={report}",
        # A user's plain install brings no pytest-asyncio (tests/install); this venv's would
        # warn that the example's ini does not set its loop scope.
        "-p",
        "no:asyncio",
        "stack/test_stack.py",
    )
    result.assert_outcomes(passed=3, warnings=0)
    result.stdout.fnmatch_lines(
        [
            "streamguard: target=stack gateway -> model (entry gateway)*",
            "stack: model (python ../stream_app.py --port *), gateway (python gateway.py --port "
            "* --upstream 127.0.0.1:*)",
            "*test_model_cut_reaches_the_client * 3 * cut(after_chunks=3) at model",
            "*test_next_test_streams_whole * 8 * -",
        ]
    )
    tests = {t["nodeid"].rsplit("::", 1)[1]: t for t in json.loads(report.read_text())["tests"]}
    [cut] = tests["test_model_cut_reaches_the_client"]["faults"]
    assert (cut["kind"], cut["hop"], cut["fired"]) == ("cut", "model", True)
    assert "ended" in cut["evidence"]
    assert tests["test_next_test_streams_whole"]["faults"] == []


def _bytecode(folder: str, names: list[str]) -> list[str]:
    return [name for name in names if name == "__pycache__"]


def test_inner_faults_count_and_every_violation_names_them(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """An inner latency breaks the client's TTFT deadline: the violation names it with its hop
    beside the entry's; a freeze of the model after chunk 2 is set off by the client's chunk
    and fires; a cut on the inner hop by bytes fires too (strict faults fail none of them)."""
    pytester.makeini(stack_ini())
    pytester.makepyfile(
        f"""
        import pytest

        CHAT = {CHAT}

        @pytest.mark.token_deadline(ttft=0.3, chunk=5.0)
        def test_inner_latency(streamguard):
            streamguard.hop("model").faults.latency(400)
            streamguard.faults.latency(1)
            streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")

        def test_inner_freeze(streamguard):
            frozen = streamguard.hop("model").faults.freeze(0.6, after_chunks=2)
            trace = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
            assert trace.completed, trace.error
            assert max(trace.gaps) >= 0.5
            assert frozen.hop == "model"

        def test_inner_cut_by_bytes(streamguard):
            streamguard.hop("model").faults.cut(after_bytes=300)
            trace = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
            assert not trace.completed

        def test_inner_down(streamguard):
            streamguard.hop("model").faults.down()
            trace = streamguard.stream(
                "/v1/chat/completions", json=CHAT, format="openai", allow_empty=True
            )
            assert not trace.completed
            # The example gateway answers a refused upstream with a 500: the fault still fired.
            assert trace.error_kind == "http", trace.error

        def test_inner_restart(streamguard):
            restart = streamguard.hop("model").faults.restart(after_chunks=2)
            cut = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
            assert not cut.completed
            again = streamguard.stream("/v1/chat/completions", json=CHAT, format="openai")
            assert again.completed, again.error
            assert restart.hop == "model"

        def test_entry_hop_is_the_clients_own(streamguard):
            assert streamguard.hop("gateway").faults is streamguard.faults
            assert streamguard.hop("model").target.url != streamguard.target.url
            with open("pids.txt", "w") as pids:
                print(streamguard.target.pid, streamguard.hop("model").target.pid, file=pids)
        """
    )
    result = run_stack(pytester, toxiproxy_url, "--streamguard-strict-faults", "-v")
    result.assert_outcomes(passed=5, failed=1)
    # Both services were stopped at the session's end.
    pids = [int(pid) for pid in (pytester.path / "pids.txt").read_text().split()]
    assert len(pids) == 2
    assert not any(pid_alive(pid) for pid in pids)
    failure = "\n".join(error_section(result.outlines, "test_inner_latency"))
    assert "active faults: latency(ms=1, jitter=0, stream='downstream'), " in failure, failure
    assert "latency(ms=400, jitter=0, stream='downstream') at model" in failure, failure
    assert "never fired" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_inner_freeze*PASSED*",
            "*test_inner_cut_by_bytes*PASSED*",
            "*test_inner_down*PASSED*",
            "*test_inner_restart*PASSED*",
        ]
    )


def test_bad_stacks_get_clear_errors(pytester: pytest.Pytester, toxiproxy_url: str) -> None:
    """A stack beside a single target's option is a usage error; a bad service entry names
    itself; a service that fails to start is named; an unknown hop names the stack's hops."""
    pytester.makeini(stack_ini())
    pytester.makepyfile("def test_nothing(streamguard):\n    pass\n")
    both = run_stack(pytester, toxiproxy_url, "--streamguard-target-url", "http://127.0.0.1:9")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(
        [
            "*streamguard_services (ini key streamguard_services) and streamguard_target_url "
            "(--streamguard-target-url) are both set*"
        ]
    )
    bad = run_stack(pytester, toxiproxy_url, "--streamguard-service", "gateway=gw {model}")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["*'gateway=gw {model}' from --streamguard-service: {model} names no service started*"]
    )

    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nstreamguard_services =\n"
        f"    model = {sys.executable} -c 'import sys; print(\"no model here\"); sys.exit(3)'\n"
        f"    gateway = {sys.executable} {GATEWAY} --port {{port}} --upstream {{model}}\n"
    )
    failed = run_stack(pytester, toxiproxy_url)
    failed.assert_outcomes(errors=1)
    failed.stdout.fnmatch_lines(
        [
            "*streamguard stack failed to start: service model failed to start: service model "
            "exited*",
            "*no model here*",
        ]
    )
    # A crash is not a wrong ready path: no hint about one.
    assert "streamguard_service_ready" not in failed.stdout.str()

    pytester.makeini(stack_ini(extra="streamguard_service_ready =\n    model = /nope\n"))
    not_ready = run_stack(pytester, toxiproxy_url)
    not_ready.assert_outcomes(errors=1)
    not_ready.stdout.fnmatch_lines(
        [
            "*streamguard stack failed to start: service model failed to start: *"
            "answered HTTP 404*",
            "*hint: a service's ready path is the ini key streamguard_service_ready*(/nope here)",
        ]
    )

    pytester.makeini(stack_ini())
    pytester.makepyfile(
        """
        def test_unknown_hop(streamguard):
            streamguard.hop("modle")
        """
    )
    unknown = run_stack(pytester, toxiproxy_url)
    unknown.assert_outcomes(failed=1)
    unknown.stdout.fnmatch_lines(
        ["*streamguard.hop('modle'): no such service; the stack's services are model, gateway*"]
    )


def test_hop_without_a_stack_says_how_to_start_one(
    pytester: pytest.Pytester, toxiproxy_url: str, app_url: str
) -> None:
    pytester.makepyfile(
        """
        def test_hop(streamguard):
            streamguard.hop("model")
        """
    )
    result = run_stack(pytester, toxiproxy_url, "--streamguard-target-url", app_url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*streamguard.hop('model'): this session has no stack*--streamguard-service NAME=COMMAND*"]
    )


def test_slow_reader_is_refused_on_an_inner_hop(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """The stack given on the command line (no ini), each service's ready path its own."""
    pytester.makepyfile(
        """
        def test_slow(streamguard):
            assert streamguard.hop("model").target.ready_path == "/healthz"
            assert streamguard.target.ready_path == "/readyz"
            streamguard.hop("model").faults.slow_reader(2000)
        """
    )
    result = run_stack(
        pytester,
        toxiproxy_url,
        "--streamguard-service",
        f"model={sys.executable} {STREAM_APP} --port {{port}}",
        "--streamguard-service",
        f"gateway={sys.executable} {GATEWAY} --port {{port}} --upstream {{model}}",
        "-o",
        "streamguard_service_ready=model = /healthz\ngateway = /readyz",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*hop('model').faults.slow_reader(2000)*bandwidth(KB_PER_SECOND)*"]
    )


def test_a_buffering_gateway_is_named_by_hop(pytester: pytest.Pytester, toxiproxy_url: str) -> None:
    """A gateway that sends each answer whole: the client's stream is ``buffered`` at
    ``gateway``, since the model's answer reached the gateway spread over time (the inner
    hop's stamps, paired by the request id the gateway forwarded), for one stream and for two
    read at once."""
    pytester.makeini(stack_ini(buffer=True))
    pytester.makepyfile(
        """
        SLOW = {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_new_tokens": 16, "interval_s": 0.05}

        def test_buffered(streamguard):
            trace = streamguard.stream("/v1/chat/completions", json=SLOW, format="openai")
            assert trace.completed, trace.error
            [found] = [f for f in trace.findings if f.name == "buffered"]
            assert found.hop == "gateway", found
            assert trace.stack.entry == "gateway" and trace.stack.note is None
            model = trace.stack.inner["model"]
            assert (model[-1][0] - model[0][0]) / 1e9 >= 0.5, model

        def test_two_at_once(streamguard):
            result = streamguard.load(2, path="/v1/chat/completions", json=SLOW, format="openai")
            ids = {trace.stack.request_id for trace in result.traces}
            assert len(ids) == 2 and None not in ids
            for trace in result.traces:
                assert trace.stack.note is None, trace.stack.note
                model = trace.stack.inner["model"]
                assert (model[-1][0] - model[0][0]) / 1e9 >= 0.5, model
                assert sum(n for _, n in model) < 4000, "one stream's answer only"
            assert {f.hop for f in result.findings if f.name == "buffered"} == {"gateway"}
        """
    )
    result = run_stack(pytester, toxiproxy_url, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_buffered: buffered at gateway: 16 of 16 chunks*"])


def test_the_stacks_page_shows_the_example_files_unchanged() -> None:
    """docs/stacks.md's ini and test blocks are examples/stack's files (which the test above
    runs), so what the page shows is what runs."""
    page = (EXAMPLES.parent / "docs" / "stacks.md").read_text()
    ini = "\n".join(
        line
        for line in (EXAMPLES / "stack" / "pytest.ini").read_text().splitlines()
        if not line.startswith("#")
    )
    assert f"```ini\n{ini.strip()}\n```" in page
    test_file = (EXAMPLES / "stack" / "test_stack.py").read_text().strip()
    assert f"```python\n{test_file}\n```" in page


def test_every_service_dies_when_pytest_is_killed_hard(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """The reaper covers a stack's services as it covers a single target: SIGKILL pytest, and
    the gateway and the model are gone."""
    pytester.makeini(stack_ini())
    pytester.makepyfile(
        """
        import json, os, threading

        def test_started(streamguard):
            pids = [streamguard.target.pid, streamguard.hop("model").target.pid]
            with open("pids.json.tmp", "w") as f:
                json.dump(pids, f)
            os.replace("pids.json.tmp", "pids.json")
            threading.Event().wait(120)
        """
    )
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "pytest", "--streamguard"),
            *("--streamguard-toxiproxy", toxiproxy_url, "-p", "no:cacheprovider"),
        ],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (pytester.path / "pids.json").exists(), 60, "the inner test to start")
        pids = json.loads((pytester.path / "pids.json").read_text())
        assert len(pids) == 2
        assert all(pid_alive(pid) for pid in pids)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        for pid in pids:
            wait_until(lambda pid=pid: not pid_alive(pid), 10, f"service {pid} to die with pytest")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_streams_without_an_id_at_once_are_not_paired(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """A gateway that forwards no request id: two streams read at once cannot be told apart on
    the inner hop, so they are not paired, their traces say why, and the finding's hop is
    unknown (never the entry by default)."""
    pytester.makeini(stack_ini(buffer=True, drop_ids=True))
    pytester.makepyfile(
        """
        SLOW = {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_new_tokens": 16, "interval_s": 0.05}

        def test_two_at_once(streamguard):
            result = streamguard.load(2, path="/v1/chat/completions", json=SLOW, format="openai")
            for trace in result.traces:
                assert trace.stack.inner == {}
                assert "2 streams were open at once" in trace.stack.note, trace.stack.note
            assert {f.hop for f in result.findings if f.name == "buffered"} == {"unknown"}

        def test_one_alone(streamguard):
            trace = streamguard.stream("/v1/chat/completions", json=SLOW, format="openai")
            assert trace.stack.note is None, trace.stack.note
            assert [f.hop for f in trace.findings if f.name == "buffered"] == ["gateway"]
        """
    )
    result = run_stack(pytester, toxiproxy_url, "-v")
    result.assert_outcomes(passed=2)


def test_a_gateway_read_timeout_is_an_idle_cut_at_the_gateway(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """A gateway that gives up on an upstream silent 0.4 s: 4 streams at once whose model
    writes a token every 0.7 s are cut after that same silence, at the gateway (it closed the
    model's connection first); the same streams at a 0.05 s pace complete with no finding."""
    pytester.makeini(stack_ini(gateway=" --read-timeout 0.4"))
    pytester.makepyfile(
        """
        def chat(interval_s):
            return {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                    "max_new_tokens": 4, "interval_s": interval_s}

        def test_slow_model(streamguard):
            result = streamguard.load(4, path="/v1/chat/completions", json=chat(0.7),
                                      format="openai")
            assert all(not t.completed for t in result.traces)
            [found] = [f for f in result.findings if f.name == "idle_cut"]
            assert found.hop == "gateway", found
            assert len(found.streams) == 4, found
            assert 0.35 <= found.data["silence_s"] <= 0.6, found

        def test_healthy(streamguard):
            result = streamguard.load(4, path="/v1/chat/completions", json=chat(0.05),
                                      format="openai")
            assert all(t.completed for t in result.traces)
            assert result.findings == []
        """
    )
    result = run_stack(pytester, toxiproxy_url, "-v")
    result.assert_outcomes(passed=2)


def test_a_model_that_answers_in_one_piece_is_named(
    pytester: pytest.Pytester, toxiproxy_url: str
) -> None:
    """A model that sends its response head at once and its whole answer 0.4 s later in one
    write (``one_write``: 16 writes in a burst split across the gateway's reads when a busy
    machine preempted the model mid-burst), through a gateway that passes bytes on as they
    come: ``buffered at model``, since the hop's stamps count the answer's body, not its head
    (from the head, the answer looked spread over 0.4 s and the gateway was named)."""
    pytester.makeini(stack_ini())
    pytester.makepyfile(
        """
        def test_one_piece(streamguard):
            request = {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                       "max_new_tokens": 16, "interval_s": 0, "first_token_s": 0.4,
                       "one_write": True}
            trace = streamguard.stream("/v1/chat/completions", json=request, format="openai")
            assert trace.completed, trace.error
            [found] = [f for f in trace.findings if f.name == "buffered"]
            assert found.hop == "model", (found, trace.stack)
        """
    )
    result = run_stack(pytester, toxiproxy_url, "-v")
    result.assert_outcomes(passed=1)


BLOCKED_AT = """
def test_blocked_at(streamguard):
    chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 15}
    result = streamguard.load(5, path="/v1/chat/completions", json=chat, format="openai")
    assert all(t.completed for t in result.traces), [t.error for t in result.traces]
    blocked = [f for f in result.findings if f.name == "blocked_loop"]
    print("blocked at:", *sorted({f.hop for f in blocked}) or ["none"])
    print("probes:", *sorted(p.hop for p in result.probe.hops))
"""
# The model's probe goes to its own address, not through the proxy in front of it: a second of
# latency there holds the gateway's answer, never the probe's.
DIRECT = """
def test_direct(streamguard):
    streamguard.hop("model").faults.latency(1000)
    chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 3}
    trace = streamguard.stream("/v1/chat/completions", json=chat, format="openai")
    assert trace.ttft >= 1.0, trace.ttft
    [model] = streamguard.probe.inner
    assert model.samples and all(0 < took < 1e9 for _, took in model.samples), model.samples
    # The gateway's ready path asks the model's with the probe's request id, so the model's
    # tap pairs it: the second it waited there is not the gateway's own.
    gateway = streamguard.probe
    slow = [(stamp, took) for stamp, took in gateway.samples if took and took >= 1e9]
    assert slow and all(took - gateway.behind[stamp] < 0.5e9 for stamp, took in slow), (
        slow, gateway.behind)
"""


@pytest.mark.parametrize(
    ("model", "gateway", "blocked_at"),
    [
        ("blocked_loop", "", "model"),
        ("healthy", "", "none"),
        ("healthy", " --block-s 0.15", "gateway"),
    ],
)
def test_a_blocked_loop_is_named_at_the_hop_whose_own_probe_waited(
    pytester: pytest.Pytester, toxiproxy_url: str, model: str, gateway: str, blocked_at: str
) -> None:
    """Each service is probed on its own ready path, directly (through no fault): a model
    server whose loop a ``time.sleep`` in its async generator blocks is ``blocked_loop at
    model`` (the gateway's ``/readyz`` waited too, on the model's: the innermost that waited is
    named), a gateway that blocks on every 5th piece it passes on is at the gateway, and the
    healthy stack has no blocked_loop, while its model's probe answers beside a second of
    latency on the model's hop (and the gateway's, which asks the model's, is paired with it)."""
    pytester.makeini(stack_ini(model=f"{CHAT_APP} --incident {model}", gateway=gateway))
    pytester.makepyfile(BLOCKED_AT + (DIRECT if blocked_at == "none" else ""))
    result = run_stack(pytester, toxiproxy_url, "-s")
    result.assert_outcomes(passed=2 if blocked_at == "none" else 1)
    result.stdout.fnmatch_lines([f"*blocked at: {blocked_at}", "*probes: gateway model"])
