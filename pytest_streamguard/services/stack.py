"""A stack: several services started in order, each inner one behind a proxy of its own.

``--streamguard-service NAME=COMMAND`` (repeatable, in start order; ini
``streamguard_services``, one ``NAME = COMMAND`` per line) names the services. In a COMMAND,
``{port}`` is that service's own port (chosen as for ``--streamguard-target-cmd``: a free port,
also in ``PORT``; without it the port is read from the service's listening line or socket), and
``{host}`` the address the service listens on, where its proxy dials it (127.0.0.1, or
``--streamguard-upstream-host`` where the Toxiproxy runs elsewhere), and
``{NAME}`` is an earlier service's address ``host:port`` *through the proxy the plugin puts in
front of it*, so a fault can be put on that inner hop (``streamguard.hop(NAME).faults``). The
last service is the entry: clients reach it through the session's own proxy, as they reach a
single target.

Each service is ready when its ready path answers 2xx: ``streamguard_service_ready
NAME=PATH`` (ini ``streamguard_service_ready``), else the shared ``--streamguard-ready-path``.
A service that fails to start stops the ones started before it, and the error names it.

:mod:`~pytest_streamguard.services.stack_spec` parses the specs; this module starts and stops
them (:func:`start_stack`, :class:`Stack`); the plugin's fixtures create the proxies (the
``front`` callback), as this layer knows no Toxiproxy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_streamguard.common.display import shown_command
from pytest_streamguard.errors import StartupError
from pytest_streamguard.services.app import Target, start_target
from pytest_streamguard.services.stack_spec import PLACEHOLDER, ServiceSpec

__all__ = ["Stack", "start_stack"]


@dataclass(frozen=True)
class _ServiceSettings:
    """What :func:`~pytest_streamguard.services.app.start_target` reads, for one service."""

    target_cmd: tuple[str, ...]
    target_cwd: Path | None
    ready_path: str
    startup_timeout: float
    target_description: str
    target_url: str | None = None
    target_args: tuple[str, ...] = ()


@dataclass
class Stack:
    """The started services, in start order (``services``), and the address through its
    proxy of every service but the entry (``fronts``: what ``{NAME}`` became)."""

    services: dict[str, Target] = field(default_factory=dict)
    fronts: dict[str, str] = field(default_factory=dict)

    @property
    def entry(self) -> Target:
        """The last service: the one clients reach."""
        return list(self.services.values())[-1]

    def stop(self) -> None:
        """Stop every service, the entry first (the reverse of the start order)."""
        for target in reversed(list(self.services.values())):
            target.stop()


def _filled(spec: ServiceSpec, fronts: dict[str, str], host: str) -> tuple[str, ...]:
    def fill(found: re.Match[str]) -> str:
        return {**fronts, "host": host}.get(found.group(1), found.group(0))

    return tuple(PLACEHOLDER.sub(fill, arg) for arg in spec.command)


def start_stack(
    specs: Sequence[ServiceSpec],
    *,
    shared_ready_path: str,
    startup_timeout: float,
    cwd: Path | None,
    front: Callable[[str, Target], str],
    host: str = "127.0.0.1",
) -> Stack:
    """Start ``specs`` in order and wait for each to be ready; put a proxy in front of each but
    the last (``front(name, target)`` creates it and returns its ``host:port``), whose address
    fills the ``{NAME}`` of the later commands; ``host`` fills ``{host}``. A service that
    fails stops every one started before it, and the StartupError names it."""
    stack = Stack()
    try:
        for spec in specs:
            argv = _filled(spec, stack.fronts, host)
            ready_path = spec.ready_path or shared_ready_path
            settings = _ServiceSettings(
                target_cmd=argv,
                target_cwd=cwd,
                ready_path=ready_path,
                startup_timeout=startup_timeout,
                target_description=f"service {spec.name}: command {shown_command(spec.command)}",
            )
            try:
                target = start_target(settings, name=f"service {spec.name}", host=host)
            except StartupError as exc:
                # A service that never became ready (not one that crashed) gets the hint.
                hint = (
                    "\nhint: a service's ready path is the ini key streamguard_service_ready "
                    f"('{spec.name} = PATH' on a line of its own), else "
                    f"--streamguard-ready-path ({ready_path} here)"
                    if "2xx" in str(exc)
                    else ""
                )
                raise StartupError(f"service {spec.name} failed to start: {exc}{hint}") from None
            target.kind = "service"
            stack.services[spec.name] = target
            if spec is not specs[-1]:
                stack.fronts[spec.name] = front(spec.name, target)
    except BaseException:
        stack.stop()
        raise
    return stack
