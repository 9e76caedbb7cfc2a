"""What NCCL's own benchmark says: the output of nccl-tests' ``all_reduce_perf`` (and its siblings), parsed (pure).

The test prints a table, one row per message size, after a ``#`` header, then its summary::

    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
      1073741824     268435456     float     sum      -1   6759.0  158.86  297.86      0   6737.4  159.37  298.82      0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 70.742

``busbw`` is the bus bandwidth in GB/s (10^9 bytes per second): the algorithm bandwidth (size / time) scaled
by 2 (n-1) / n for an all-reduce, so it compares with the hardware's link speed whatever the number of ranks
(nccl-tests' doc/PERFORMANCE.md).  ``Avg bus bandwidth`` averages the out-of-place and in-place busbw of every
size, small ones included.  A row's ``#wrong`` is the count of wrong values (``N/A`` without validation): a
test that computed wrong sums measured nothing.

The columns are read from the right of each row (the last eight: time, algbw, busbw and #wrong, out-of-place
then in-place), so a test whose rows carry other leading columns (``redop`` ``none``, ``root`` a rank) parses
the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NcclRow", "NcclRun", "parse_nccl_tests"]

GB = 1e9
"""nccl-tests' GB: 10^9 bytes."""
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+(?:[eE][-+]?\d+)?)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")


@dataclass(frozen=True)
class NcclRow:
    """One message size's row."""

    size: int
    """Bytes."""
    busbw: float
    """Out-of-place bus bandwidth, bytes per second."""
    busbw_in_place: float | None
    """In-place bus bandwidth, bytes per second (None where the row has none)."""
    wrong: int
    """Wrong values over both runs (0 where the test did not validate: ``N/A``)."""


@dataclass(frozen=True)
class NcclRun:
    """One test's output: its rows and its summary."""

    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    """``# Avg bus bandwidth``, bytes per second (None: the line is missing, the test did not finish)."""
    out_of_bounds: int | None
    """``# Out of bounds values``: None when the line is missing."""

    @property
    def largest(self) -> NcclRow | None:
        """The row of the largest message size (where the bus bandwidth is the link's, not the latency's)."""
        return max(self.rows, key=lambda r: r.size, default=None)

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows) + (self.out_of_bounds or 0)

    @property
    def problem(self) -> str | None:
        """Why the run measured nothing worth judging, or None."""
        if not self.rows:
            return "its output holds no row of the nccl-tests table (size, count, type, ..., busbw, #wrong)"
        if self.avg_busbw is None:
            return "its output ends without the '# Avg bus bandwidth' line: the test did not finish"
        if self.wrong:
            return (f"it computed {self.wrong} wrong value(s) (#wrong, out of bounds): a collective that sums wrong "
                    "measures no bandwidth")
        return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _wrong(text: str) -> int:
    return int(text) if text.isdigit() else 0


def parse_nccl_tests(text: str) -> NcclRun:
    """The rows and the summary of one nccl-tests output; lines of anything else (NCCL's INFO lines, mpirun's)
    are skipped."""
    rows: list[NcclRow] = []
    avg: float | None = None
    bounds: int | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            m = _AVG.match(line)
            if m:
                avg = float(m.group(1)) * GB
            m = _OUT_OF_BOUNDS.match(line)
            if m:
                bounds = int(m.group(1))
            continue
        fields = line.split()
        if len(fields) < 9 or not fields[0].isdigit():
            continue
        in_place = fields[-8:]
        values = [_number(in_place[i]) for i in (0, 1, 2, 4, 5, 6)]
        if any(v is None for v in values[:3]):
            continue
        busbw_ip = values[5] if all(v is not None for v in values[3:]) else None
        rows.append(NcclRow(int(fields[0]), float(values[2] or 0.0) * GB,
                            None if busbw_ip is None else busbw_ip * GB, _wrong(in_place[3]) + _wrong(in_place[7])))
    return NcclRun(tuple(rows), avg, bounds)
