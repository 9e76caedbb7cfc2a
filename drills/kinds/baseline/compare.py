"""Compare two observations made with the same method, and judge contract clauses against the comparison (pure).

:func:`compare` refuses (:class:`~drills.kinds.baseline.errors.MethodMismatch`) unless the methods are equal, then gives
one :class:`Row` per layer and per hole: both estimates, the change and its uncertainty
(:mod:`drills.kinds.baseline.stats`).  Improvement is signed so that more is better: a layer's share going up (in
percentage points of healthy capacity), a hole's GPU-hours going down.

A :class:`Clause` is one contract sentence (:data:`TEMPLATES`)::

    effective utilization improves by at least 10 points over the signed baseline
    the data pipeline hole shrinks by at least 2.5 GPU-hours over the signed baseline

It PASSes only when the improvement minus its uncertainty is at least the figure (the one-sided 97.5 % lower
confidence bound clears it), FAILs otherwise, and is INCONCLUSIVE when the uncertainty is unknown or the source
could not measure the hole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from drills.kinds.baseline.errors import BaselineUsageError
from drills.kinds.baseline.method import require_same
from drills.kinds.baseline.slices import HOLES, LAYERS, hole_estimate, layer_estimate
from drills.kinds.baseline.statement import Observed
from drills.kinds.baseline.stats import CONFIDENCE, Change, Estimate, change
from drills.target.leakreport.model import Hole

__all__ = ["TEMPLATES", "Clause", "ClauseVerdict", "Comparison", "Judgement", "Row", "compare", "parse_clause"]

TEMPLATES = (
    "<allocated|active|effective> utilization improves by at least <N> points over the signed baseline",
    "the <data pipeline|communication|fragmentation|fault tolerance> hole shrinks by at least <N> GPU-hours over "
    "the signed baseline",
)


@dataclass(frozen=True)
class Row:
    """One layer or hole, before and after."""

    name: str
    """The contract's name: ``effective``, ``dataPipeline``, ..."""
    kind: str
    """``layer`` or ``hole``."""
    before: Estimate | None
    after: Estimate | None
    change: Change | None
    unmeasured: str | None = None
    """Why the source could not measure it (a hole from Prometheus); None when measured."""

    @property
    def unit(self) -> str:
        return "points" if self.kind == "layer" else "GPU-h"

    @property
    def words(self) -> str:
        return f"{self.name} utilization" if self.kind == "layer" else f"the {Hole(self.name).words} hole"

    def _scale(self) -> float:
        return 100.0 if self.kind == "layer" else 1.0

    @property
    def improvement(self) -> float | None:
        """More is better: a layer's gain in percentage points, a hole's shrinkage in GPU-hours."""
        if self.change is None:
            return None
        return self.change.delta * 100.0 if self.kind == "layer" else 0.0 - self.change.delta

    @property
    def uncertainty(self) -> float | None:
        """The 95 % half-width of the improvement, in its unit (None: unknown)."""
        if self.change is None or self.change.uncertainty is None:
            return None
        return self.change.uncertainty * self._scale()

    def show(self, est: Estimate | None) -> str:
        if est is None:
            return "unmeasured"
        se = "" if est.standard_error is None else f" ± {est.standard_error * self._scale():.2g}"
        return f"{est.value * 100:.2f} %{se}" if self.kind == "layer" else f"{est.value:.4g} GPU-h{se}"

    @property
    def change_words(self) -> str:
        """``improved``/``grew``-style words for the improvement's sign, as the clause reads it."""
        if self.kind == "layer":
            return "rose by" if (self.improvement or 0) >= 0 else "fell by"
        return "shrank by" if (self.improvement or 0) >= 0 else "grew by"

    def to_dict(self) -> dict[str, Any]:
        def est(e: Estimate | None) -> dict[str, Any] | None:
            return None if e is None else {"value": e.value, "standardError": e.standard_error, "slices": e.slices}
        return {"name": self.name, "kind": self.kind, "unit": self.unit, "before": est(self.before),
                "after": est(self.after), "improvement": self.improvement, "uncertainty": self.uncertainty,
                "dof": None if self.change is None else self.change.dof, "unmeasured": self.unmeasured}


@dataclass(frozen=True)
class Comparison:
    before: Observed
    after: Observed
    rows: tuple[Row, ...]

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def lines(self) -> list[str]:
        """The comparison for people: a line per layer and hole."""
        out = [f"  {'':26}{'baseline (± se)':>26}  {'run (± se)':>26}   improvement ± {CONFIDENCE:.0%} uncertainty"]
        for r in self.rows:
            if r.improvement is None:
                change_text = f"not compared: {r.unmeasured or 'unmeasured'}"
            else:
                u = "unknown" if r.uncertainty is None else f"{r.uncertainty:.2g}"
                change_text = f"{r.improvement:+.3g} {r.unit} ± {u}"
            out.append(f"  {r.words:26}{r.show(r.before):>26}  {r.show(r.after):>26}   {change_text}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": {"name": self.before.name, "window": list(self.before.window), "keyid": self.before.keyid},
                "run": {"name": self.after.name, "window": list(self.after.window), "keyid": self.after.keyid},
                "method": self.before.method.to_dict(), "confidence": CONFIDENCE,
                "rows": [r.to_dict() for r in self.rows]}


def compare(before: Observed, after: Observed) -> Comparison:
    """Both observations' layers and holes side by side; refuses when their methods differ."""
    require_same(before.method, after.method, before.name, after.name)
    rows: list[Row] = []
    for name in LAYERS:
        b, a = layer_estimate(before.slices, name), layer_estimate(after.slices, name)
        rows.append(Row(name, "layer", b, a, change(b, a)))
    for name in HOLES:
        hb, ha = hole_estimate(before.slices, name), hole_estimate(after.slices, name)
        why = before.unmeasured.get(name) or after.unmeasured.get(name)
        if hb is None or ha is None:
            rows.append(Row(name, "hole", hb, ha, None, why or "the source could not measure it"))
        else:
            rows.append(Row(name, "hole", hb, ha, change(hb, ha)))
    return Comparison(before, after, tuple(rows))


class ClauseVerdict(Enum):
    """What a clause says about a comparison."""

    PASS = "PASS"
    """The improvement minus its uncertainty is at least the clause's figure."""
    FAIL = "FAIL"
    """It is not: the improvement is smaller, or too uncertain to be sure it clears the figure."""
    INCONCLUSIVE = "INCONCLUSIVE"
    """The uncertainty is unknown or the source could not measure the quantity: no claim either way."""


_NUMBER = r"(?P<n>\d+(?:\.\d+)?)"
_SUFFIX = r"(?:\s+over\s+the\s+signed\s+baseline)?"
_LAYER = re.compile(rf"(?P<layer>allocated|active|effective)\s+utili[sz]ation\s+improves\s+by\s+at\s+least\s+"
                    rf"{_NUMBER}\s*(?:percentage\s+)?points?{_SUFFIX}", re.IGNORECASE)
_HOLE = re.compile(rf"the\s+(?P<hole>[a-z][a-z ]*?)\s+hole\s+shrinks\s+by\s+at\s+least\s+{_NUMBER}\s*"
                   rf"gpu[- ]hours?{_SUFFIX}", re.IGNORECASE)


@dataclass(frozen=True)
class Clause:
    """One contract sentence: ``quantity`` (a layer or hole name) must improve by at least ``minimum``."""

    text: str
    quantity: str
    minimum: float

    @property
    def kind(self) -> str:
        return "layer" if self.quantity in LAYERS else "hole"

    def judge(self, comparison: Comparison) -> "Judgement":
        row = comparison.row(self.quantity)
        unit = row.unit
        if row.improvement is None:
            return Judgement(self, ClauseVerdict.INCONCLUSIVE, None, None,
                             f"{row.words} was not measured ({row.unmeasured}); no claim either way")
        if row.uncertainty is None:
            return Judgement(self, ClauseVerdict.INCONCLUSIVE, row.improvement, None,
                             f"{row.words} {row.change_words} {abs(row.improvement):.3g} {unit}, but its uncertainty "
                             "is unknown "
                             "(a side has fewer than 2 slices); no claim either way")
        lower = row.improvement - row.uncertainty
        ok = lower >= self.minimum
        verdict = ClauseVerdict.PASS if ok else ClauseVerdict.FAIL
        relation = "clears" if ok else "does not clear"
        return Judgement(self, verdict, row.improvement, row.uncertainty,
                         f"{row.words} {row.change_words} {abs(row.improvement):.3g} ± {row.uncertainty:.2g} "
                         f"{unit} ({CONFIDENCE:.0%} uncertainty); improvement minus uncertainty = {lower:+.3g} "
                         f"{unit}, which {relation} {self.minimum:g} {unit}")


@dataclass(frozen=True)
class Judgement:
    clause: Clause
    verdict: ClauseVerdict
    improvement: float | None
    uncertainty: float | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"clause": self.clause.text, "verdict": self.verdict.value, "improvement": self.improvement,
                "uncertainty": self.uncertainty, "minimum": self.clause.minimum, "message": self.message}


def parse_clause(text: str) -> Clause:
    """A clause from its sentence (case and extra spaces do not matter; a final full stop and quotes are
    dropped).  :class:`BaselineUsageError` names the sentence and shows the templates otherwise."""
    sentence = " ".join(text.strip().strip("\"'").split()).rstrip(".")
    m = _LAYER.fullmatch(sentence)
    if m:
        return Clause(sentence, m.group("layer").lower(), float(m.group("n")))
    m = _HOLE.fullmatch(sentence)
    if m:
        try:
            hole = Hole.parse(m.group("hole"))
        except ValueError as exc:
            raise BaselineUsageError(f"clause {text!r}: {exc}") from None
        return Clause(sentence, hole.value, float(m.group("n")))
    raise BaselineUsageError(f"clause {text!r} is not one Firedrill can judge; write one of: "
                             + " | ".join(f"'{t}'" for t in TEMPLATES) + " (N a number, e.g. 10 or 2.5)")
