"""Prometheus metrics of one app instance, in its own registry, plus the event-loop lag probe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Seconds; 0.2 and 0.5 are the interactive gap and TTFT deadlines, so quantiles near them are
not interpolated across a wide bucket."""

LOOP_LAG_BUCKETS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
)

LOOP_PROBE_INTERVAL = 0.02
"""Seconds between loop-lag probes: a blocked loop shows up within 20 ms."""


class TargetMetrics:
    """Every metric the target exports; one instance per app, so tests can run several apps."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "streamguard_target_time_to_first_token_seconds",
            "Request arrival to the write of the first token event.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "streamguard_target_inter_token_latency_seconds",
            "Gap between the writes of consecutive token events of one stream.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.streamer_token_latency = Histogram(
            "streamer_token_latency_seconds",
            "Time a token waits between the engine producing it and the server writing it.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.active_streams = Gauge(
            "streamguard_target_active_streams",
            "Generation requests holding a slot (streaming or not).",
            registry=r,
        )
        self.completed = Counter(
            "streamguard_target_streams_completed",
            "Streams that ended normally.",
            registry=r,
        )
        self.cancelled = Counter(
            "streamguard_target_streams_cancelled",
            "Streams ended early by the client side: disconnect, slow_reader or shutdown.",
            ["reason"],
            registry=r,
        )
        self.failed = Counter(
            "streamguard_target_streams_failed",
            "Streams whose generation raised or stalled.",
            registry=r,
        )
        self.rejected = Counter(
            "streamguard_target_requests_rejected",
            "Requests refused before generation: busy (admission), not_ready, bad_request, "
            "shutting_down, client_gone (disconnected before the body was complete).",
            ["reason"],
            registry=r,
        )
        self.streamer_timeouts = Counter(
            "streamguard_target_streamer_timeouts",
            "Streams ended because the engine sent nothing for --stream-timeout seconds.",
            registry=r,
        )
        self.ready = Gauge(
            "streamguard_target_ready", "1 once the model is loaded and warmed up.", registry=r
        )
        self.loop_lag = Histogram(
            "streamguard_target_event_loop_lag_seconds",
            f"How late a {LOOP_PROBE_INTERVAL}s timer fired on the event loop.",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.loop_lag_max = Gauge(
            "streamguard_target_event_loop_lag_max_seconds",
            "Largest event-loop lag seen since the app started.",
            registry=r,
        )
        for reason in ("disconnect", "slow_reader", "shutdown"):
            self.cancelled.labels(reason)
        for reason in ("busy", "not_ready", "bad_request", "shutting_down", "client_gone"):
            self.rejected.labels(reason)

    def track_engine(
        self,
        in_flight: Callable[[], int],
        threads: Callable[[], int],
        queue_depths: Callable[[], dict[str, int]] = dict,
    ) -> None:
        """Export the engine's own view: requests it still generates for, live threads, and
        the depth of each of its internal queues."""
        Gauge(
            "streamguard_target_engine_requests",
            "Requests the engine is still generating for (cancelled ones leave within a step).",
            registry=self.registry,
        ).set_function(lambda: float(in_flight()))
        Gauge(
            "streamguard_target_generation_threads",
            "Live per-request generation threads (generate engine and naive mode).",
            registry=self.registry,
        ).set_function(lambda: float(threads()))
        depths = Gauge(
            "streamguard_target_engine_queue_depth",
            "Items in the engine's internal queues (batch engine: input = requests not yet "
            "scheduled, output = outputs nobody reads, handlers = registered result handlers, "
            "cancelled = cancelled requests not yet retired); all 0 when idle.",
            ["queue"],
            registry=self.registry,
        )
        for name in queue_depths():
            depths.labels(name).set_function(
                lambda name=name: float(queue_depths().get(name, 0))  # type: ignore[misc]
            )

    def track_cuda(self) -> None:
        """Export CUDA memory allocated and reserved by torch (only when running on CUDA)."""
        import torch

        Gauge(
            "streamguard_target_cuda_memory_allocated_bytes",
            "torch.cuda.memory_allocated() on the current device.",
            registry=self.registry,
        ).set_function(lambda: float(torch.cuda.memory_allocated()))
        Gauge(
            "streamguard_target_cuda_memory_reserved_bytes",
            "torch.cuda.memory_reserved() on the current device.",
            registry=self.registry,
        ).set_function(lambda: float(torch.cuda.memory_reserved()))

    async def probe_loop_lag(self) -> None:
        """Run forever: time a short sleep and record how late it woke up."""
        loop = asyncio.get_running_loop()
        worst = 0.0
        while True:
            before = loop.time()
            await asyncio.sleep(LOOP_PROBE_INTERVAL)
            lag = max(0.0, loop.time() - before - LOOP_PROBE_INTERVAL)
            self.loop_lag.observe(lag)
            if lag > worst:
                worst = lag
                self.loop_lag_max.set(lag)
