"""How the users' samples are judged and shown: when the SLA held again, which requests were lost, and the
per-second series the report draws (pure)."""

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


def sla_back(samples: tuple[Sample, ...], since: float, until: float, ttft_s: float, bucket_s: float = 1.0
             ) -> float | None:
    """Seconds after ``since`` from which every bucket of request starts up to ``until`` had its p99 TTFT within
    ``ttft_s`` and nothing failed or lost (pure); None when the last bucket still misses."""
    buckets = by_start((s for s in samples if since <= s.start_mono < until), since, bucket_s)
    if not buckets:
        return None
    good_from: int | None = None
    for b in range(max(buckets) + 1):
        items = buckets.get(b, [])
        ttfts = [s.ttft_s for s in items if s.outcome is Outcome.ANSWERED and s.ttft_s is not None]
        ok = bool(items) and all(s.outcome is Outcome.ANSWERED for s in items) and \
            nearest_rank(ttfts, 99) <= ttft_s
        if ok and good_from is None:
            good_from = b
        elif not ok:
            good_from = None
    return None if good_from is None else good_from * bucket_s


def lost_findings(samples: tuple[Sample, ...], act_mono: float | None, limit: int = 3) -> list[str]:
    """Plain words for the first few lost requests: id, error, and when each started relative to the act."""
    lost = [s for s in samples if s.outcome is Outcome.LOST]
    out = []
    for s in lost[:limit]:
        when = f"{s.start_mono - act_mono:+.2f} s from the act" if act_mono is not None else "before any act"
        out.append(f"request {s.request_id} ({when}, {s.attempts} attempt(s)): {s.error or 'no answer'}")
    if len(lost) > limit:
        out.append(f"... and {len(lost) - limit} more lost request(s)")
    return out


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
