"""How the users' samples are judged: when the SLA held again and which requests were lost (pure); the
per-second series the report draws is :func:`drills.load.series.series`."""

from __future__ import annotations

from typing import Any

from drills.load.run import Outcome, Sample, nearest_rank
from drills.load.series import by_start

Obj = dict[str, Any]


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
