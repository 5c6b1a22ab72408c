"""Faults the Toxiproxy proxy applies: toxics added through its API, and the proxy disabled.

This module owns the test's proxy as its faults drive it (:class:`ProxyControl`: the API, the
names of the toxics added, the ``down`` faults), the standing toxics of ``latency``,
``slow_reader``, ``bandwidth``, ``slicer``, ``cut(after_bytes=)``, ``reset(after_ms=)``,
``blackhole`` and of a profile (:class:`ProxyToxics` and its kinds), and ``down``
(:class:`ProxyDown`). A function per word (:func:`latency_fault`, :func:`cut_after_bytes`, ...)
checks its arguments and maps them to toxics; the fault adds them when applied and removes them
when the test ends. They act on every
connection through the proxy from the moment they are added (the toxics that act at chunk N
are in :mod:`pytest_streamguard.faults.chunks`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Sequence
from typing import Any

from toxiproxy.proxy import Proxy

from pytest_streamguard.errors import ToxiproxyError
from pytest_streamguard.faults.fired import judge
from pytest_streamguard.faults.mechanism import Mechanism, active_on, checked_number
from pytest_streamguard.faults.profiles import Profile
from pytest_streamguard.faults.toxiproxy_client import ToxiproxyAPI
from pytest_streamguard.stream.trace import FaultRecord, StreamTrace

STREAMS = ("upstream", "downstream")
# The fastest slow reader measured to keep its rate within 10 % (benchmarks/slow_reader_rate.py,
# docs/faults.md); a faster one is refused rather than silently slower than asked.
SLOW_READER_MAX_BPS = 10_000_000
# The slow reader's toxic runs this much faster than the reader, so the client's pacing (exact
# to the byte) sets the rate and the toxic's 100 ms steps cannot pull it below the rate asked.
SLOW_READER_TOXIC_HEADROOM = 1.25
#: Below this a slow reader's rate is more likely KB/s written as bytes/s than meant: a 1 KB
#: event then takes over 15 s to read. ``slow_reader(rate, tiny=True)`` says it is meant.
SLOW_READER_TINY_BPS = 64

#: A toxic to add: its type, its stream (``upstream``/``downstream``) and its attributes.
ToxicSpec = tuple[str, str, dict[str, Any]]


class ProxyControl:
    """One test's proxy as its faults drive it: the API, the names of the toxics added (one
    numbered series per test) and the ``down`` faults that disable it."""

    def __init__(self, api: ToxiproxyAPI, proxy: Proxy) -> None:
        self.api = api
        self.proxy = proxy
        # Whether a down fault disabled the proxy and it is not enabled again yet, and the down
        # faults applied since it last was (newest last).
        self.disabled = False
        self.downs: list[ProxyDown] = []
        self._count = 0

    def name(self, kind: str) -> str:
        """A name for the next toxic of type ``kind`` added for the test."""
        self._count += 1
        return f"streamguard_{kind}_{self._count}"

    def reset(self) -> None:
        """Remove leftover toxics and re-enable the proxy (state from a test that crashed)."""
        with contextlib.suppress(ToxiproxyError):
            listing = f"list toxics of proxy {self.proxy.name!r}"
            for name in self.api.call(listing, self.proxy.toxics):
                self.api.remove_toxic(self.proxy, name)
        if not self.api.get_proxy(self.proxy.name).enabled:
            self.api.set_enabled(self.proxy, True)


class ProxyToxics(Mechanism):
    """A fault that is toxics on the proxy: added when applied, removed newest first."""

    def __init__(
        self, control: ProxyControl, kind: str, params: dict[str, Any], toxics: list[ToxicSpec]
    ) -> None:
        super().__init__(FaultRecord(kind=kind, params=params, toxics=[]))
        self.control = control
        self.toxics = toxics

    def apply(self) -> None:
        """Add the toxics, naming each in ``record.toxics`` as it is added (so a fault half
        added is still removed whole)."""
        # Before the first call: a toxic may act on an open stream before the call returns.
        self.record.on_ns = time.perf_counter_ns()
        for type_, stream, attributes in self.toxics:
            name = self.control.name(type_)
            self.control.api.add_toxic(self.control.proxy, name, type_, stream, attributes)
            self.record.toxics.append(name)

    def remove(self) -> list[str]:
        """Remove every toxic of the fault, whether or not another could not be."""
        problems: list[str] = []
        if self.record.off_ns is None and self.record.on_ns is not None:
            self.record.lifting_ns = time.perf_counter_ns()
        for name in reversed(self.record.toxics):
            try:
                self.control.api.remove_toxic(self.control.proxy, name)
            except ToxiproxyError as exc:
                problems.append(str(exc))
        if self.record.off_ns is None and self.record.on_ns is not None:
            self.record.off_ns = time.perf_counter_ns()
        return problems


class SlowReader(ProxyToxics):
    """``slow_reader``: the client paces its reads (it tells :attr:`waited`), the proxy's
    ``bandwidth`` toxic throttles a little above the rate."""

    def __init__(self, control: ProxyControl, bytes_per_second: float) -> None:
        rate = max(1, math.ceil(bytes_per_second * SLOW_READER_TOXIC_HEADROOM / 1000))
        super().__init__(
            control,
            "slow_reader",
            {"bytes_per_second": bytes_per_second},
            [("bandwidth", "downstream", {"rate": rate})],
        )
        #: Seconds the reader waited to keep to the rate, while this fault was on.
        self.waited = 0.0

    def apply(self) -> None:
        """Add the toxic; the client does the reading slowly."""
        super().apply()
        self.record.applied_by = "client"

    def judge(self, traces: Sequence[StreamTrace]) -> tuple[bool, str]:
        """Fired when its reader waited to keep to the rate."""
        return judge(self.record, active_on(self.record, traces), waited=self.waited)


class ProfileToxics(ProxyToxics):
    """The toxics of a named profile (:mod:`pytest_streamguard.faults.profiles`), as one
    ``profile(name=...)`` fault; each keeps the name and toxicity the profile gives it."""

    def __init__(self, control: ProxyControl, profile: Profile) -> None:
        super().__init__(control, "profile", {"name": profile.name}, [])
        self.profile = profile

    def apply(self) -> None:
        """Add the profile's toxics through the API wrapper's ``call()`` (with their
        toxicity, which a profile file may set)."""
        self.record.on_ns = time.perf_counter_ns()
        proxy = self.control.proxy
        for toxic in self.profile.toxics:
            name = toxic.name or self.control.name(toxic.type)
            self.control.api.call(
                f"add toxic {name!r} ({toxic.type}, {toxic.stream}) of profile "
                f"{self.profile.name!r} to proxy {proxy.name!r}",
                functools.partial(
                    proxy.add_toxic,
                    name=name,
                    type=toxic.type,
                    stream=toxic.stream,
                    toxicity=toxic.toxicity,
                    attributes=dict(toxic.attributes),
                ),
            )
            self.record.toxics.append(name)

    def judge(self, traces: Sequence[StreamTrace]) -> tuple[bool, str]:
        """Fired when any of its toxics did, each judged by its type."""
        return judge(self.record, active_on(self.record, traces), toxics=self.profile.toxics)


class ProxyDown(Mechanism):
    """``down``: the proxy disabled (open connections closed, new ones refused) until the test
    ends. The proxy is one, so the newest ``down`` on enables it again for all of them, once,
    and stamps their records; while it cannot, it stays on, tried again by the next clear."""

    def __init__(self, control: ProxyControl) -> None:
        super().__init__(FaultRecord(kind="down", params={}, toxics=[]))
        self.control = control

    def apply(self) -> None:
        """Disable the proxy."""
        # Stamped before the call: open connections close while it runs, and a stream cut
        # by it must count it among its faults.
        self.record.on_ns = time.perf_counter_ns()
        self.control.downs.append(self)
        self.control.api.set_enabled(self.control.proxy, False)
        self.control.disabled = True

    def remove(self) -> list[str]:
        """Enable the proxy again, if this is the newest ``down`` and the proxy is disabled."""
        if self.control.downs[-1:] != [self] or not self.control.disabled:
            return []
        problems: list[str] = []
        try:
            self.control.api.set_enabled(self.control.proxy, True)
            self.control.disabled = False
        except ToxiproxyError as exc:
            problems.append(str(exc))
        for down in self.control.downs:
            if down.record.off_ns is None:
                down.record.off_ns = time.perf_counter_ns()
        if not self.control.disabled:
            self.control.downs.clear()
        return problems


def latency_fault(control: ProxyControl, ms: float, jitter: float, stream: str) -> ProxyToxics:
    """``latency``: a ``latency`` toxic on ``stream``, whole milliseconds."""
    checked_number("latency", "ms", ms, minimum=0, unit="milliseconds")
    checked_number("latency", "jitter", jitter, minimum=0, unit="milliseconds")
    for name, value in (("ms", ms), ("jitter", jitter)):
        if 0 < value < 1:
            raise ValueError(
                f"faults.latency({name}={value!r}): the latency is in milliseconds, and "
                f"Toxiproxy applies whole milliseconds ({value!r} ms would be 0); "
                f"for {value!r} seconds write {round(value * 1000)}"
            )
    if stream not in STREAMS:
        raise ValueError(f"faults.latency(stream={stream!r}): expected one of {', '.join(STREAMS)}")
    return ProxyToxics(
        control,
        "latency",
        {"ms": ms, "jitter": jitter, "stream": stream},
        [("latency", stream, {"latency": round(ms), "jitter": round(jitter)})],
    )


def slow_reader_fault(control: ProxyControl, bytes_per_second: float, tiny: bool) -> SlowReader:
    """``slow_reader``: its rate checked (bytes/s, 1 to ``SLOW_READER_MAX_BPS``; under
    ``SLOW_READER_TINY_BPS`` only with ``tiny``)."""
    checked_number("slow_reader", "bytes_per_second", bytes_per_second, minimum=1, unit="bytes/s")
    if bytes_per_second < SLOW_READER_TINY_BPS and not tiny:
        raise ValueError(
            f"faults.slow_reader(bytes_per_second={bytes_per_second!r}): the rate is in "
            f"bytes per second, so a 1 KB event would take "
            f"{1000 / bytes_per_second:.0f} s to read; for {bytes_per_second!r} KB/s write "
            f"slow_reader({bytes_per_second * 1000:g}), or pass tiny=True if "
            f"{bytes_per_second!r} bytes/s is meant"
        )
    if bytes_per_second > SLOW_READER_MAX_BPS:
        raise ValueError(
            f"faults.slow_reader(bytes_per_second={bytes_per_second!r}): at most "
            f"{SLOW_READER_MAX_BPS:,} (10 MB/s), the fastest rate measured to be kept "
            "within 10 %; for a faster link use faults.bandwidth(kb_per_second)"
        )
    return SlowReader(control, bytes_per_second)


def bandwidth_fault(control: ProxyControl, kb_per_second: float) -> ProxyToxics:
    """``bandwidth``: a ``bandwidth`` toxic downstream, whole KB/s."""
    checked_number(
        "bandwidth", "kb_per_second", kb_per_second, minimum=1, integer=True, unit="KB/s"
    )
    return ProxyToxics(
        control,
        "bandwidth",
        {"kb_per_second": kb_per_second},
        [("bandwidth", "downstream", {"rate": int(kb_per_second)})],
    )


def slicer_fault(
    control: ProxyControl, average_size: int, size_variation: int, delay_us: int
) -> ProxyToxics:
    """``slicer``: a ``slicer`` toxic downstream (its variation under its average size)."""
    checked_number("slicer", "average_size", average_size, minimum=1, integer=True)
    checked_number("slicer", "size_variation", size_variation, minimum=0, integer=True)
    checked_number("slicer", "delay_us", delay_us, minimum=0, integer=True)
    if size_variation >= average_size:
        raise ValueError(
            f"faults.slicer(size_variation={size_variation!r}): expected less than "
            f"average_size ({average_size!r})"
        )
    attributes = {
        "average_size": int(average_size),
        "size_variation": int(size_variation),
        "delay": int(delay_us),
    }
    return ProxyToxics(
        control,
        "slicer",
        {"average_size": average_size, "size_variation": size_variation, "delay_us": delay_us},
        [("slicer", "downstream", attributes)],
    )


def cut_after_bytes(control: ProxyControl, after_bytes: int | None) -> ProxyToxics:
    """``cut(after_bytes=)``: a ``limit_data`` toxic downstream (headers included)."""
    limit = int(checked_number("cut", "after_bytes", after_bytes, minimum=0, integer=True))
    return ProxyToxics(
        control,
        "cut",
        {"after_bytes": after_bytes},
        [("limit_data", "downstream", {"bytes": limit})],
    )


def reset_after_ms(control: ProxyControl, after_ms: float) -> ProxyToxics:
    """``reset(after_ms=)``: a ``reset_peer`` toxic downstream, whole milliseconds."""
    checked_number("reset", "after_ms", after_ms, minimum=0)
    return ProxyToxics(
        control,
        "reset",
        {"after_ms": after_ms},
        [("reset_peer", "downstream", {"timeout": round(after_ms)})],
    )


def blackhole_fault(control: ProxyControl) -> ProxyToxics:
    """``blackhole``: a ``timeout`` toxic of 0 both ways (data dropped, connections open)."""
    return ProxyToxics(
        control,
        "blackhole",
        {},
        [("timeout", "upstream", {"timeout": 0}), ("timeout", "downstream", {"timeout": 0})],
    )
