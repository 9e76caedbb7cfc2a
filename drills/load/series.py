"""The users' samples per second of start time: what the report's latency-over-time charts are drawn from (pure).

Shared by every drill that runs a load (serving, control plane)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from drills.load.run import Outcome, Sample, nearest_rank, totals

Obj = dict[str, Any]


def by_start(samples: Iterable[Sample], origin: float, bucket_s: float = 1.0) -> dict[int, list[Sample]]:
    """The samples in buckets of ``bucket_s`` by start time, numbered from ``origin`` (negative before it)."""
    buckets: dict[int, list[Sample]] = {}
    for s in samples:
        buckets.setdefault(int((s.start_mono - origin) // bucket_s), []).append(s)
    return buckets


def series(samples: Iterable[Sample], origin: float, bucket_s: float = 1.0, *,
           latency: Callable[[Sample], float | None] = lambda s: s.ttft_s, key: str = "p99_ttft_s") -> list[Obj]:
    """Per bucket of start time (seconds from ``origin``, the act): requests sent, answered, failed, lost and, under
    ``key``, the p99 of ``latency`` (TTFT by default) over the answered ones, None when none was; the evidence's
    latency-over-time chart is drawn from it."""
    buckets = by_start(samples, origin, bucket_s)
    out = []
    for b in sorted(buckets):
        items = buckets[b]
        t = totals(items)
        values = [v for s in items if s.outcome is Outcome.ANSWERED and (v := latency(s)) is not None]
        out.append({"t": b * bucket_s, "sent": t.sent, "answered": t.answered, "failed": t.failed, "lost": t.lost,
                    key: nearest_rank(values, 99) if values else None})
    return out
