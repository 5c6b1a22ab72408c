"""The confusion set (issue 37): incident apps run under a user's load through the plugin, and
what the findings named for each, against the cause the app was written with.

Each :class:`Case` is one app (a server of tests/confusion/apps/, started by the plugin from
``--streamguard-target-cmd``, some behind a real nginx) with one incident or none, and the test
a user would write for it (a guarded load, the probe on by default). :func:`run_case` runs that
test in a pytest process of its own and reads the findings of its record in the JSON report.
``tests/confusion/test_confusion.py`` asserts the causes and ``test_confusion_blame.py`` the
look-alikes and controls; ``python tests/confusion/table.py`` prints the table
docs/findings.md shows.

Findings that blame the app are every finding but ``queued`` (capacity, not blame) and
``own_fault`` (the plugin's own fault, named as that). A case is
``right`` when every expected finding was named and nothing else was blamed; a named cause that
was not named is a ``miss``; a blame the app does not deserve is ``false blame``.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_streamguard.report.compact import expanded

APPS = Path(__file__).resolve().parent / "apps"

#: Findings that name a fact about capacity rather than a fault of the app.
NOT_BLAME = frozenset({"queued", "own_fault"})


@dataclass(frozen=True)
class Case:
    """One incident app and the test a user runs on it.

    ``app``: the app's file in tests/confusion/apps/ and its flags; ``ingress``: flags of
    ``behind_nginx.py`` to put a real nginx in front of it (None: none); ``body``: the test's
    body (``streamguard`` and ``CHAT(tokens)`` in scope); ``expected``: the findings its
    incident should get (empty for a look-alike or a healthy control; ``queued`` where it is
    capacity); ``kind``: ``cause``, ``look-alike`` or ``control``; ``missing``: the rule
    today's findings lack to name it (the test expects the miss until that rule lands);
    ``intermittent``: why today's rules misjudge it in some runs and not others (the test
    tolerates that, and says so, until they hold); ``marker``: the test's ``token_deadline``
    arguments, if it has one; ``user_test_passes``: False where the incident breaks that
    deadline (the user's test then fails).
    """

    name: str
    stack: str
    kind: str
    app: tuple[str, ...]
    body: str
    expected: frozenset[str] = frozenset()
    ingress: tuple[str, ...] | None = None
    missing: str = ""
    intermittent: str = ""
    marker: str = ""
    user_test_passes: bool = True

    def command(self) -> str:
        """The ``--streamguard-target-cmd`` that starts the app (and its nginx)."""
        script, *flags = self.app
        runner = "node" if script.endswith(".js") else sys.executable
        app = [runner, str(APPS / script), *flags]
        if self.ingress is None:
            return " ".join(app)
        front = [sys.executable, str(APPS / "behind_nginx.py"), *self.ingress, "--"]
        return " ".join([*front, *app])


class Misjudged(AssertionError):
    """The findings missed a case's cause or blamed an app that did not deserve it."""


@dataclass(frozen=True)
class Outcome:
    """What the plugin named for one run of a case."""

    case: Case
    named: tuple[str, ...]
    evidence: tuple[str, ...]
    passed: bool
    output: str
    timeline: str = ""

    @property
    def blamed(self) -> frozenset[str]:
        """The findings that blame the app."""
        return frozenset(self.named) - NOT_BLAME

    @property
    def missed(self) -> frozenset[str]:
        """Expected findings not named."""
        return self.case.expected - frozenset(self.named)

    @property
    def false_blame(self) -> frozenset[str]:
        """Blame the app does not deserve."""
        return self.blamed - self.case.expected

    def check(self) -> None:
        """Raise :class:`Misjudged` unless every expected finding was named and nothing else
        was blamed."""
        if self.missed or self.false_blame:
            raise Misjudged(
                f"{self.case.name} ({self.case.stack}, {self.case.kind}): expected "
                f"{sorted(self.case.expected) or 'no blame'}, named {list(self.named) or 'nothing'}"
                f" ({self.verdict})\n"
                + "".join(f"  {line}\n" for line in self.evidence)
                + self.timeline
            )

    @property
    def verdict(self) -> str:
        """``right``, ``miss``, ``false blame`` or ``miss, false blame``."""
        wrong = [w for w, bad in (("miss", self.missed), ("false blame", self.false_blame)) if bad]
        return ", ".join(wrong) or "right"


#: The user's test module: ``CHAT(tokens)`` is an OpenAI chat completion request of that many
#: tokens; ``BODY`` is replaced by the case's body.
INNER_TEST = """
import pytest


def CHAT(tokens):
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "team-model", "messages": messages, "stream": True, "max_tokens": tokens}


MARKER
def test_case(streamguard):
BODY
"""


# Each case's pytest is forked from a server that has imported pytest, the plugin and the openai
# client its judge calls on these apps' streams (multiprocessing's forkserver, one per xdist
# worker, itself without threads): a case's own process, as a user's run is, but without paying
# those imports again (0.75 s of CPU a case measured, of a ``python -m pytest``'s 1.7 s).
_PRELOAD = ["pytest", "pytest_streamguard.plugin", "pytest_streamguard.judge.openai", "confusion"]
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(_PRELOAD)


def _inner_pytest(args: list[str], work: str, env: dict[str, str], out: str) -> None:
    """In the forked process: ``python -m pytest ARGS`` in ``work`` with ``env``, its output
    (both streams, in the order written) to the file ``out``; exits with pytest's code after
    the exit handlers a ``python -m pytest`` runs (the plugin's own stop its processes)."""
    os.chdir(work)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [sys.executable, *args]
    sys.path.insert(0, work)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = pytest.main(args)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def users_test(output: str, timeline: str) -> str:
    """What a case's failed check of its user's test shows: that test's output, then the
    streams (:func:`timeline`: stamps, the reader's held loop, what each hop said)."""
    return f"the user's test:\n{output}\nits streams:\n{timeline}"


def run_inner(
    argv: list[str], work: Path, report: Path, timeout: float, name: str
) -> tuple[dict[str, Any], str, bool]:
    """Run a case's inner pytest (``argv``: ``python -m pytest ARGS``, in ``work``, writing
    its JSON report to ``report``): its one test record, its output and whether it passed."""
    assert argv[:3] == [sys.executable, "-m", "pytest"], argv
    out = work / "output.txt"
    # Only this plugin: the other installed ones (html, cov, xdist, ...) cost half a second a
    # start, and none of them takes part in a user's incident.
    env = {**os.environ, "PYTEST_ADDOPTS": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    inner = _FORKS.Process(target=_inner_pytest, args=(argv[3:], str(work), env, str(out)))
    inner.start()
    inner.join(timeout)
    ran_past = inner.exitcode is None
    if ran_past:
        inner.kill()
        inner.join()
    output = out.read_text() if out.exists() else f"(no output; exit code {inner.exitcode})"
    if ran_past:
        raise AssertionError(f"case {name}: its pytest ran past {timeout} s\n{output}")
    if not report.exists():
        raise AssertionError(f"case {name}: no report written\n{output}")
    (record,) = json.loads(report.read_text())["tests"]
    return record, output, inner.exitcode == 0


def run_case(case: Case, toxiproxy_url: str, timeout: float = 60.0) -> Outcome:
    """Run the case's test with the plugin on (its own pytest process, the app started by the
    plugin, no other pytest plugin loaded) and read the findings of its record."""
    with tempfile.TemporaryDirectory(prefix="confusion-") as tmp:
        work = Path(tmp)
        marker = f"@pytest.mark.token_deadline({case.marker})" if case.marker else ""
        source = INNER_TEST.replace("MARKER", marker)
        source = source.replace("BODY", textwrap.indent(case.body.strip(), "    "))
        (work / "test_incident.py").write_text(source)
        report = work / "sg.json"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_streamguard.plugin",
            "-q",
            "--streamguard",
            "--streamguard-toxiproxy",
            toxiproxy_url,
            "--streamguard-target-cmd",
            case.command(),
            "--streamguard-json",
            str(report),
            "test_incident.py",
        ]
        record, output, passed = run_inner(argv, work, report, timeout, case.name)
        found = record["findings"]
    return Outcome(
        case,
        tuple(dict.fromkeys(f["name"] for f in found)),
        tuple(f"{f['name']}: {f['evidence']}" for f in found),
        passed,
        output,
        timeline(record),
    )


def _at(stamp: int | None, t0: int) -> str:
    return "-" if stamp is None else f"{(stamp - t0) / 1e9:.3f}"


def timeline(record: dict[str, Any]) -> str:
    """A run's streams and probe in seconds since its first request, for a misjudged case's
    message: each stream's request, head, first and last chunk, end and how it ended; the
    probes that waited (at least 50 ms, or no answer)."""
    traces = sorted((expanded(t) for t in record["traces"]), key=lambda t: t["request_ns"])
    if not traces:
        return "  no streams\n"
    t0 = traces[0]["request_ns"]
    lines = ["  stream: request head first last end (ending)"]
    for t in traces:
        chunks = t["chunks"]
        stamps = [t["request_ns"], t["response_ns"]]
        stamps += [chunks[0]["stamp_ns"], chunks[-1]["stamp_ns"]] if chunks else [None, None]
        ending = "completed" if t["completed"] else t["error_kind"]
        times = " ".join(_at(s, t0) for s in [*stamps, t["end_ns"]])
        lines.append(f"  {t['name']}: {times} ({ending}, {len(chunks)} chunks)")
        # The client's own loop held (its reads merged, stamped at the last segment's arrival)
        # and what each hop wrote (kept for a failed test): a flake's evidence beside its stamps.
        held = " ".join(f"{_at(a, t0)}-{_at(b, t0)}" for a, b in t.get("reader_held", []))
        lines += [f"    reader held: {held}"] if held else []
        said = t.get("said", [])
        lines += [f"    {_at(w['stamp_ns'], t0)} {w['hop']} said: {w['text']}" for w in said]
    probe = record.get("probe") or {}
    waited = [
        f"{_at(stamp, t0)}+{'none' if took is None else f'{took / 1e9:.3f}'}"
        for stamp, took in probe.get("samples", [])
        if took is None or took >= 0.05e9
    ]
    lines.append(f"  probe waits (sent+took): {' '.join(waited) or 'none'}")
    return "".join(f"{line}\n" for line in lines)
