"""Prometheus metrics in the real server's names (``toxiproxy_proxy_*_bytes_total``)."""

from __future__ import annotations

from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
_LABELS: Final = ("direction", "proxy", "listener", "upstream")


class Metrics:
    """Byte counters per proxy and direction, updated when a link ends (as in Toxiproxy)."""

    def __init__(self, runtime: bool) -> None:
        # Go's client has no *_created series; this process only serves these metrics.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        self.received = Counter(
            "toxiproxy_proxy_received_bytes_total",
            "Bytes read from the source socket of a link.",
            _LABELS,
            registry=self.registry,
        )
        self.sent = Counter(
            "toxiproxy_proxy_sent_bytes_total",
            "Bytes written to the destination socket of a link.",
            _LABELS,
            registry=self.registry,
        )
        self._children: dict[tuple[str, ...], tuple[Counter, Counter]] = {}
        if runtime:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    def count(self, direction: str, proxy: tuple[str, str, str], received: int, sent: int) -> None:
        """Add one finished link's byte counts; ``proxy`` is its (name, listen, upstream)."""
        labels = (direction, *proxy)
        children = self._children.get(labels)
        if children is None:
            # labels() validates and locks on each call: look each series up once.
            children = (self.received.labels(*labels), self.sent.labels(*labels))
            self._children[labels] = children
        children[0].inc(received)
        children[1].inc(sent)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
