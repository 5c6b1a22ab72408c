"""A test's verdict once its body has ended: the one failure it raises, or the note it adds.

The session checks a test's streams after its body and raises what :func:`failure_of` returns,
the first that applies of:

1. a broken token deadline (:class:`~pytest_streamguard.errors.DeadlineViolation`);
2. findings the test's ``fail_on`` names (:class:`~pytest_streamguard.errors.FindingsFailed`);
3. under ``--streamguard-unchecked fail``, ``fail_on`` gates the test could not check
   (:class:`~pytest_streamguard.errors.FindingsUnchecked`);
4. under ``--streamguard-strict-faults``, faults that never fired
   (:class:`~pytest_streamguard.errors.FaultsNotFired`).

A body that failed on its own (its own ``assert``) keeps its exception; when its streams also
broke the deadline, :func:`body_failure_note` is the note that exception gets, so the verdict
that names the cause shows with it, not instead of it.

This family sits below the streams, the faults and the reports (``LAYERS`` in
``tests/test_import_cycles.py``): the streams come in the :class:`~.deadlines.CheckedStream`
shape, the faults' failure is built by the function the caller passes
(:func:`pytest_streamguard.faults.fired.faults_not_fired`), and where the reports are written
comes as display text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pytest_streamguard.errors import DeadlineViolation, StreamguardFailure
from pytest_streamguard.verdict.deadlines import (
    CheckedStream,
    Violation,
    format_violations,
)
from pytest_streamguard.verdict.findings import (
    Finding,
    Unchecked,
    findings_failed,
    findings_unchecked,
)
from pytest_streamguard.verdict.probe import Probed

__all__ = ["body_failure_note", "failure_of", "reports_line"]

#: A fault that never fired, as the caller's faults family holds it.
Fault = TypeVar("Fault")


def failure_of(
    violations: Sequence[Violation],
    *,
    traces: Sequence[CheckedStream],
    gated: Sequence[Finding],
    unfired: Sequence[Fault],
    strict_faults: bool,
    not_fired: Callable[[list[Fault]], StreamguardFailure],
    report: str | None,
    probe: Probed | None = None,
    unchecked: Sequence[Unchecked] = (),
) -> StreamguardFailure | None:
    """The failure a test whose body passed raises, or None when its streams pass.

    ``violations``: how the test's streams (``traces``) broke its deadline
    (:func:`~.deadlines.check_traces`; the test's record keeps them too, so they are checked
    once); ``gated``: the findings its ``fail_on`` names; ``unfired``: its faults that never
    fired, failed only under ``strict_faults``, with the failure ``not_fired`` builds;
    ``report``: where every stream's verdict is written (:func:`reports_line`); ``probe``: the
    samples of the probe sent beside the streams, with which the message names the cause in
    words; ``unchecked``: the ``fail_on`` gates it could not check, when they fail it."""
    if violations:
        found = list(violations)
        return DeadlineViolation(
            format_violations(found, traces=traces, report=report, probe=probe), found
        )
    if gated:
        return findings_failed(list(gated))
    if unchecked:
        return findings_unchecked(list(unchecked))
    if unfired and strict_faults:
        return not_fired(list(unfired))
    return None


def body_failure_note(
    raised: BaseException,
    violations: Sequence[Violation],
    *,
    traces: Sequence[CheckedStream],
    report: str | None,
    probe: Probed | None = None,
) -> str | None:
    """The note for the exception a test's body ``raised`` when its streams also broke the
    deadline (``violations``; ``probe`` as in :func:`failure_of`); None when they did not, or
    when what the body raised is already a :class:`~pytest_streamguard.errors.DeadlineViolation`
    (an explicit check's)."""
    if not violations or isinstance(raised, DeadlineViolation):
        return None
    return (
        "streamguard: this test's streams also broke its token deadline "
        "(checked after the body):\n"
        + format_violations(list(violations), traces=traces, report=report, probe=probe)
    )


def reports_line(*, html: str | None, json: str | None) -> str | None:
    """The verdict's line that says where every stream's verdict and timeline is written:
    ``html`` and ``json`` are the reports' paths as shown, None for one not asked for; None
    when neither is."""
    written = [
        f"{what} {path}"
        for what, path in (("HTML report", html), ("JSON report", json))
        if path is not None
    ]
    if not written:
        return None
    return "every stream's verdict and timeline: the " + " and the ".join(written)
