"""pytest-xdist support: workers send their records, the controller merges them (docs/load.md,
"pytest-xdist").

At the end of its session a worker puts its records, as builtin types, in
``config.workeroutput["streamguard"]``; xdist sends that to the controller with the
"workerfinished" event, and the controller's ``pytest_testnodedown`` merges it
(:class:`~pytest_streamguard.report.merge.Merger`, the same code that merges saved reports). A
worker that crashed has no ``workeroutput``: it is named as missing. xdist is never imported
here: the hooks are registered only when the xdist plugin is loaded, and only on the
controller.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_streamguard.plugin.settings import SEED_WORKERINPUT
from pytest_streamguard.report.merge import Merger
from pytest_streamguard.report.records import JSON_VERSION, TestRecord

PAYLOAD_KEY = "streamguard"
PLUGIN_NAME = "streamguard-xdist"


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (xdist sets ``workerinput`` on its config)."""
    return hasattr(config, "workerinput")


def payload(
    config: pytest.Config, records: list[TestRecord], meta: dict[str, Any]
) -> dict[str, Any]:
    """What a worker sends: its id, metadata and every record, all builtin types."""
    return {
        "version": JSON_VERSION,
        "worker": getattr(config, "workerinput", {}).get("workerid"),  # gw0, ...; None: none
        "meta": dict(meta),
        "tests": [record.to_dict() for record in records],
    }


def send(config: pytest.Config, records: list[TestRecord], meta: dict[str, Any]) -> None:
    """On a worker: hand the records to xdist for the controller."""
    workeroutput: dict[str, Any] = getattr(config, "workeroutput")  # noqa: B009
    workeroutput[PAYLOAD_KEY] = payload(config, records, meta)


class XdistController:
    """The controller's hooks: merge each finished worker's records into the session's
    :class:`~pytest_streamguard.report.merge.Merger`."""

    def __init__(self, merger: Merger, seed: int) -> None:
        self.merger = merger
        self.seed = seed

    def pytest_configure_node(self, node: Any) -> None:
        """Hand the run's seed to each worker, so every process draws from the same one."""
        node.workerinput[SEED_WORKERINPUT] = self.seed

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """A worker finished (or crashed): merge what it sent, or name it as missing."""
        workerinput = getattr(node, "workerinput", None) or {}
        name = str(workerinput.get("workerid", getattr(node.gateway, "id", "?")))
        output = getattr(node, "workeroutput", None)
        sent = output.get(PAYLOAD_KEY) if isinstance(output, dict) else None
        if sent is None:
            reason = f"crashed: {error}" if error else "sent no streamguard results"
            self.merger.add_missing(name, reason)
            return
        self.merger.add(name, sent)


def register(config: pytest.Config, merger: Merger, seed: int) -> None:
    """Register the controller hooks when xdist is loaded and this is not a worker."""
    if config.pluginmanager.hasplugin("xdist") and not is_worker(config):
        config.pluginmanager.register(XdistController(merger, seed), PLUGIN_NAME)
