"""Prometheus metrics of the planner server (`GET /metrics`, text exposition format).

Each app has its own registry (two servers in one process, as in the tests, do not share counters). Named after
what an operator asks: how many requests and with what status, how deep the queue is, how large the batches are,
how long a request waits and how long its batch decodes.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, waiting, in_flight):
        """`waiting()`: requests queued for the decoder; `in_flight()`: plan requests being handled."""
        self.registry = r = CollectorRegistry()
        self.requests = Counter("wamdiff_requests", "HTTP requests answered, by route and status.", ["route", "status"],
                                registry=r)
        self.queue_depth = Gauge("wamdiff_queue_depth", "Requests waiting for the decoder.", registry=r)
        self.queue_depth.set_function(waiting)
        self.in_flight = Gauge("wamdiff_in_flight", "Plan requests being read, queued or decoded.", registry=r)
        self.in_flight.set_function(in_flight)
        self.batch_size = Histogram("wamdiff_batch_size", "Requests per decoded batch.", buckets=BATCH_BUCKETS, registry=r)
        self.latency = Histogram("wamdiff_request_seconds", "Plan request latency, body read to answer.",
                                 buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue_s = Histogram("wamdiff_queue_seconds", "Time a plan request waited for its batch.",
                                 buckets=LATENCY_BUCKETS_S, registry=r)
        self.decode_s = Histogram("wamdiff_decode_seconds", "Decode time of a batch.", buckets=LATENCY_BUCKETS_S, registry=r)
        self.abandoned = Counter("wamdiff_abandoned", "Plan requests whose client left before their batch; not decoded.",
                                 registry=r)

    def on_batch(self, size: int, decode_s: float) -> None:
        self.batch_size.observe(size)
        self.decode_s.observe(decode_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
