"""The comparison's arithmetic (pure): estimates from equal slices of a window, their standard errors, the change
between two windows and its uncertainty.

**Batch means.**  A window is cut into ``n`` equal, consecutive slices and the leak report is read for each.  The
slices are treated as ``n`` independent measurements of the same steady state (the batch-means method of
simulation output analysis: slices long against the workload's own rhythm, such as a training step or a job's
length, are close to independent; with shorter slices the standard error below is too small, so the method
records the slice length and the docs ask for slices many steps long).

- A **layer** is a share of healthy capacity: the ratio estimator ``R = sum(y) / sum(x)`` (``y`` the layer's
  GPU-hours, ``x`` the capacity's, per slice; this is the share the leak report gives for the whole window), with
  the standard error ``sqrt(sum((y_i - R x_i)^2) / (n (n - 1))) / mean(x)`` (the usual first-order ratio-estimator
  variance; equal to the standard error of the mean share when capacity is constant).
- A **hole** is GPU-hours over the whole window: the total ``T = sum(y)``, with the standard error
  ``sqrt(n) s`` (``s`` the sample standard deviation of the slices' GPU-hours), i.e. ``n`` times the standard error
  of their mean.
- The **change** between two windows is ``after - before``; its standard error is ``sqrt(se_b^2 + se_a^2)``
  (independent windows), its degrees of freedom Welch-Satterthwaite's, and its **uncertainty** the half-width of
  a two-sided 95 % confidence interval: Student's t quantile at 0.975 for those degrees of freedom times the
  standard error.  A clause passes only when the improvement minus this uncertainty clears its figure, i.e. when
  the one-sided 97.5 % lower confidence bound of the improvement does.

Fewer than two slices on either side leave the standard error unknown (``None``): no uncertainty, no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

CONFIDENCE = 0.95
"""Two-sided coverage of the uncertainty interval."""

__all__ = ["CONFIDENCE", "Change", "Estimate", "change", "share_estimate", "t_quantile", "total_estimate"]


@dataclass(frozen=True)
class Estimate:
    """A quantity measured over a window of ``slices`` equal slices, with its standard error (batch means)."""

    value: float
    standard_error: float | None
    """None when there are fewer than two slices: the slice-to-slice variation is unknown."""
    slices: int

    @property
    def dof(self) -> int:
        """Degrees of freedom of the standard error: slices - 1."""
        return self.slices - 1


def _check(values: Sequence[float], what: str) -> None:
    if not values:
        raise ValueError(f"{what}: no slices; a window needs at least one")
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"{what}: slice {i} is {v!r}, not a finite number")


def share_estimate(parts: Sequence[float], wholes: Sequence[float]) -> Estimate:
    """A share (0..1) of ``wholes`` over the window: the ratio estimator of ``parts`` (a layer's GPU-hours per
    slice) over ``wholes`` (the healthy capacity's GPU-hours per slice)."""
    _check(parts, "share parts")
    _check(wholes, "share wholes")
    if len(parts) != len(wholes):
        raise ValueError(f"{len(parts)} parts for {len(wholes)} wholes: one of each per slice")
    n, whole = len(parts), sum(wholes)
    if whole <= 0:
        raise ValueError("no healthy capacity in the window: a share of nothing is not defined")
    ratio = sum(parts) / whole
    if n < 2:
        return Estimate(ratio, None, n)
    residual = sum((y - ratio * x) ** 2 for y, x in zip(parts, wholes))
    se = math.sqrt(residual / (n * (n - 1))) / (whole / n)
    return Estimate(ratio, se, n)


def total_estimate(values: Sequence[float]) -> Estimate:
    """A total over the window (a hole's GPU-hours) from its per-slice values."""
    _check(values, "total")
    n = len(values)
    total = sum(values)
    if n < 2:
        return Estimate(total, None, n)
    mean = total / n
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return Estimate(total, math.sqrt(n * variance), n)


@dataclass(frozen=True)
class Change:
    """``after - before``, with its standard error, degrees of freedom and uncertainty (95 % half-width)."""

    before: Estimate
    after: Estimate
    delta: float
    standard_error: float | None
    dof: float | None
    uncertainty: float | None
    """t(0.975, dof) x standard error; None when either side has no standard error."""


def change(before: Estimate, after: Estimate, confidence: float = CONFIDENCE) -> Change:
    """The change from ``before`` to ``after`` (independent windows), Welch-Satterthwaite degrees of freedom."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    delta = after.value - before.value
    if before.standard_error is None or after.standard_error is None:
        return Change(before, after, delta, None, None, None)
    vb, va = before.standard_error ** 2, after.standard_error ** 2
    se = math.sqrt(vb + va)
    if se == 0.0:  # both windows were perfectly steady: nothing to widen the interval with
        return Change(before, after, delta, 0.0, float(before.dof + after.dof), 0.0)
    dof = (vb + va) ** 2 / (vb ** 2 / before.dof + va ** 2 / after.dof)
    return Change(before, after, delta, se, dof, t_quantile(1 - (1 - confidence) / 2, dof) * se)


def _t_density(x: float, dof: float) -> float:
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_norm - (dof + 1) / 2 * math.log1p(x * x / dof))


def _t_cdf(t: float, dof: float, panels: int = 400) -> float:
    """P(T <= t) for t >= 0: one half plus Simpson's rule over the density from 0 to t (it is smooth there)."""
    h = t / panels
    odd = sum(_t_density((2 * k - 1) * h, dof) for k in range(1, panels // 2 + 1))
    even = sum(_t_density(2 * k * h, dof) for k in range(1, panels // 2))
    return 0.5 + h / 3 * (_t_density(0.0, dof) + 4 * odd + 2 * even + _t_density(t, dof))


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile: the t with P(T <= t) = p, for 0.5 <= p < 1 and any real dof > 0.

    Newton's method on the CDF from the normal quantile: the CDF is concave above 0, so every step lands at or
    below the root and the iteration climbs to it without overshooting."""
    if not 0.5 <= p < 1:
        raise ValueError(f"p must be in [0.5, 1), got {p}")
    if not dof > 0:
        raise ValueError(f"degrees of freedom must be above 0, got {dof}")
    z = NormalDist().inv_cdf(p)
    if dof > 1e7 or p == 0.5:
        return z
    t = z
    for _ in range(200):
        step = (p - _t_cdf(t, dof)) / _t_density(t, dof)
        t += step
        if abs(step) < 1e-10 * max(1.0, t):
            break
    return t
