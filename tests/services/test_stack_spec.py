"""Parsing a stack's services (``--streamguard-service NAME=COMMAND``) and their ready paths:
well-formed specs come out in start order, and each bad one is an error that names the entry,
where it came from, what is wrong and what is accepted."""

from __future__ import annotations

import pytest

from pytest_streamguard.services.stack_spec import (
    ServiceSpec,
    parse_ready_paths,
    parse_services,
)

WHERE = "--streamguard-service"


def test_services_parse_in_start_order_with_their_placeholders() -> None:
    specs = parse_services(
        [
            "model = python model.py --port {port} --host {host}",
            "",
            "gateway=node gw.js --upstream http://{model}/v1 --json '{\"a\": 1}'",
        ],
        WHERE,
    )
    assert [spec.name for spec in specs] == ["model", "gateway"]
    assert specs[0].command == ("python", "model.py", "--port", "{port}", "--host", "{host}")
    # Braces around anything but a name are the command's own (JSON here).
    assert specs[1].command[-1] == '{"a": 1}'
    assert specs[1].reaches == ("model",)
    assert specs[0].reaches == ()
    assert specs[1].ready_path is None


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["python app.py"], "no service name; expected NAME=COMMAND"),
        (["=python app.py"], "no service name; expected NAME=COMMAND"),
        (["1st=python app.py"], "'1st' is not a service name; expected a letter, then"),
        (["my model=python app.py"], "'my model' is not a service name"),
        (["port=python app.py"], "'port' cannot name a service ({port} is each service's own)"),
        (["host=python app.py"], "'host' cannot name a service ({host} is each service's own)"),
        (["model="], "service model has no command"),
        (["model=python 'app.py"], "No closing quotation; expected NAME=COMMAND"),
        (
            ["model=python a.py", "model=python b.py"],
            "service model is named twice; each service needs a name of its own",
        ),
        (
            ["gateway=gw --upstream {model}", "model=python m.py"],
            "{model} names no service started before gateway; a command may name {port}, {host} "
            "(services start in the order given",
        ),
        (
            ["model=python m.py", "gateway=gw --upstream {modle}"],
            "{modle} names no service started before gateway; a command may name {port}, {host}, "
            "{model}",
        ),
        (["model=python m.py --self {model}"], "{model} is the service itself; its own port"),
    ],
)
def test_a_bad_service_says_what_is_wrong_and_what_is_accepted(
    entries: list[str], expected: str
) -> None:
    with pytest.raises(ValueError, match="from --streamguard-service: ") as raised:
        parse_services(entries, WHERE)
    assert expected in str(raised.value)


def test_ready_paths_fill_the_named_services() -> None:
    specs = parse_services(["model=python m.py", "gateway=gw {model}"], WHERE)
    ready = parse_ready_paths(["model = /health", ""], "ini key streamguard_service_ready", specs)
    assert ready == (
        ServiceSpec("model", ("python", "m.py"), "/health"),
        ServiceSpec("gateway", ("gw", "{model}"), None),
    )


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["modle=/health"], "expected NAME=PATH for one of the services (model, gateway)"),
        (["/health"], "expected NAME=PATH for one of the services (model, gateway)"),
        (["model=health"], "expected a path starting with '/', such as model=/health"),
    ],
)
def test_a_bad_ready_path_names_the_services(entries: list[str], expected: str) -> None:
    specs = parse_services(["model=python m.py", "gateway=gw {model}"], WHERE)
    with pytest.raises(ValueError, match="from --streamguard-service-ready") as raised:
        parse_ready_paths(entries, "--streamguard-service-ready", specs)
    assert expected in str(raised.value)


def test_a_ready_path_needs_services() -> None:
    with pytest.raises(ValueError, match="a service's ready path needs services"):
        parse_ready_paths(["model=/health"], "--streamguard-service-ready", ())
