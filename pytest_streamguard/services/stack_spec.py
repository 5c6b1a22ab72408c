"""The services of a stack as configured: :class:`ServiceSpec` and the parsing of
``--streamguard-service NAME=COMMAND`` and of the ini key ``streamguard_service_ready``
(``NAME = PATH`` lines) (:mod:`pytest_streamguard.services.stack` starts them). Light on
purpose: the plugin's settings import it on every pytest start, also while the plugin is off.
A ValueError names the entry, where it came from, what is wrong and what is accepted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PLACEHOLDER", "SERVICE_NAME", "ServiceSpec", "parse_ready_paths", "parse_services"]

#: A service's name: a letter, then letters, digits, ``_`` or ``-`` (it is also a placeholder).
SERVICE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# A placeholder in a command: {port}, {host} or {NAME}; braces around anything else (JSON) are
# literal. {port} and {host} are the service's own; they name no service.
_OWN = ("port", "host")
PLACEHOLDER = re.compile(r"\{([A-Za-z][A-Za-z0-9_-]*)\}")
_NAME_ACCEPTED = "a letter, then letters, digits, '_' or '-', such as model or gateway"
_SERVICE_ACCEPTED = "NAME=COMMAND, such as 'model=python model.py --port {port}'"


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the stack as configured: its name, its command (split like a shell
    would, placeholders unfilled) and its own ready path (None: the shared one)."""

    name: str
    command: tuple[str, ...]
    ready_path: str | None = None

    @property
    def reaches(self) -> tuple[str, ...]:
        """The services whose address its command names (``{NAME}``), in order of mention."""
        found = [m for arg in self.command for m in PLACEHOLDER.findall(arg) if m not in _OWN]
        return tuple(dict.fromkeys(found))


def _one_service(raw: str, where: str) -> tuple[str, tuple[str, ...]]:
    name, equals, command = raw.partition("=")
    name, command = name.strip(), command.strip()
    if not equals or not name:
        raise ValueError(f"{raw!r} from {where}: no service name; expected {_SERVICE_ACCEPTED}")
    if not SERVICE_NAME.fullmatch(name):
        raise ValueError(
            f"{raw!r} from {where}: {name!r} is not a service name; expected {_NAME_ACCEPTED}"
        )
    if name in _OWN:
        raise ValueError(
            f"{raw!r} from {where}: {name!r} cannot name a service ({{{name}}} is each "
            f"service's own); expected {_NAME_ACCEPTED}"
        )
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise ValueError(f"{raw!r} from {where}: {exc}; expected {_SERVICE_ACCEPTED}") from None
    if not argv:
        raise ValueError(
            f"{raw!r} from {where}: service {name} has no command; expected {_SERVICE_ACCEPTED}"
        )
    return name, argv


def parse_services(entries: Sequence[str], where: str) -> tuple[ServiceSpec, ...]:
    """The services of ``entries`` (``NAME=COMMAND`` each, in start order; blank ones are
    skipped), checked: names well formed and distinct, every ``{NAME}`` an earlier service.
    ``where`` names the option or ini key they came from, for the error."""
    specs: list[ServiceSpec] = []
    for raw in entries:
        if not raw.strip():
            continue
        name, argv = _one_service(raw, where)
        earlier = [spec.name for spec in specs]
        if name in earlier:
            raise ValueError(
                f"{raw!r} from {where}: service {name} is named twice; each service needs a "
                "name of its own"
            )
        spec = ServiceSpec(name, argv)
        for other in spec.reaches:
            if other in earlier:
                continue
            if other == name:
                why = f"{{{name}}} is the service itself; its own port is {{port}}"
            else:
                why = f"{{{other}}} names no service started before {name}"
            accepted = ", ".join(f"{{{n}}}" for n in [*_OWN, *earlier])
            raise ValueError(
                f"{raw!r} from {where}: {why}; a command may name {accepted} (services start "
                "in the order given, so a service reaches only those listed before it)"
            )
        specs.append(spec)
    return tuple(specs)


def parse_ready_paths(
    entries: Sequence[str], where: str, specs: tuple[ServiceSpec, ...]
) -> tuple[ServiceSpec, ...]:
    """``specs`` with the ready paths of ``entries`` (``NAME=PATH`` each) filled in."""
    paths: dict[str, str] = {}
    names = [spec.name for spec in specs]
    for raw in entries:
        if not raw.strip():
            continue
        name, equals, path = (part.strip() for part in raw.partition("="))
        if not specs:
            raise ValueError(
                f"{raw!r} from {where}: a service's ready path needs services "
                "(--streamguard-service NAME=COMMAND or the ini key streamguard_services)"
            )
        if not equals or name not in names:
            raise ValueError(
                f"{raw!r} from {where}: expected NAME=PATH for one of the services "
                f"({', '.join(names)}), such as {names[0]}=/health"
            )
        if not path.startswith("/"):
            raise ValueError(
                f"{raw!r} from {where}: expected a path starting with '/', such as {name}=/health"
            )
        paths[name] = path
    return tuple(
        ServiceSpec(spec.name, spec.command, paths.get(spec.name, spec.ready_path))
        for spec in specs
    )
