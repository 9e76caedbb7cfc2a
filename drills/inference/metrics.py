"""The Prometheus endpoint's numbers and their text exposition format (version 0.0.4), written by hand.

vLLM's metric names, so that autoscalers and dashboards built for vLLM read the
canary unchanged (docs/WORKLOAD.md lists them): the queue and batch gauges,
the time-to-first-token and time-per-output-token histograms, the success
counter, and Firedrill's own received and served counters.  Every series
carries ``model_name``.  Pure: the server feeds it under its lock.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

__all__ = ["CONTENT_TYPE", "TPOT_BUCKETS", "TTFT_BUCKETS", "Histogram", "Metrics", "number", "parse_samples"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                   2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                   0.75, 1.0, 2.5, 5.0)


def number(value: float) -> str:
    """A sample value or bucket bound as Prometheus writes it: ``+Inf``, ``3``, ``0.25``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


@dataclass
class Histogram:
    """Observations counted into buckets by upper bound (``le``), plus their sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    """Per bucket, not cumulative; one more than ``bounds`` (the +Inf bucket)."""
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if list(self.bounds) != sorted(set(self.bounds)) or not self.bounds:
            raise ValueError(f"bucket bounds must be increasing and distinct, got {self.bounds}")
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(le, observations <= le)`` for each bound and +Inf."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts):
            running += n
            out.append((bound, running))
        return out


@dataclass
class Metrics:
    """Everything ``/metrics`` reports except the gauges, which the caller reads from the admission state."""

    model: str
    received: int = 0
    """``POST /v1/completions`` requests that arrived, whatever became of them."""
    served: int = 0
    """Requests whose last token was sent; always equal to the number of ``served`` log lines."""
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))

    def render(self, waiting: int, running: int) -> str:
        """The exposition text, ending in a newline."""
        labels = f'model_name="{_label(self.model)}"'
        lines: list[str] = []

        def scalar(name: str, kind: str, text: str, value: float) -> None:
            lines.extend((f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {number(value)}"))

        def histogram(name: str, text: str, hist: Histogram) -> None:
            lines.extend((f"# HELP {name} {text}", f"# TYPE {name} histogram"))
            for bound, n in hist.cumulative():
                lines.append(f'{name}_bucket{{{labels},le="{number(bound)}"}} {n}')
            lines.append(f"{name}_sum{{{labels}}} {number(hist.total)}")
            lines.append(f"{name}_count{{{labels}}} {hist.count}")

        scalar("vllm:num_requests_running", "gauge", "Number of requests in the running batch.", running)
        scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting for a batch slot.", waiting)
        histogram("vllm:time_to_first_token_seconds",
                  "Seconds from a request's arrival to its first token (queueing included).", self.ttft)
        histogram("vllm:time_per_output_token_seconds", "Seconds between consecutive output tokens.", self.tpot)
        scalar("vllm:request_success_total", "counter", "Requests that finished (every token sent).", self.served)
        scalar("firedrill_inference_requests_received_total", "counter",
               "Completion requests that arrived, answered or not.", self.received)
        scalar("firedrill_inference_requests_served_total", "counter",
               "Requests whose last token was sent (one 'served' log line each).", self.served)
        return "\n".join(lines) + "\n"


def parse_samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of an exposition text (comments skipped): the inverse of :meth:`Metrics.render`
    for the tests and for readers that want no Prometheus client."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        samples[key] = float(value)
    return samples

