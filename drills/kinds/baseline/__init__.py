"""Baseline first: a signed utilization baseline, and contract clauses judged as improvements over it.

docs/CONTRACTS.md says why and how.  The modules:

- :mod:`drills.kinds.baseline.method`: what makes two observations comparable (source, workload, window, ...).
- :mod:`drills.kinds.baseline.mix`: the workload mix the harness runs while it observes, and its runner.
- :mod:`drills.kinds.baseline.observe`: a window read slice by slice from a leak report source (injected clock).
- :mod:`drills.kinds.baseline.slices`: the slices and the estimates made from them (pure).
- :mod:`drills.kinds.baseline.stats`: batch means, standard errors, the change and its uncertainty (pure).
- :mod:`drills.kinds.baseline.statement`: the signed baseline statement (in-toto in DSSE), sealing and verifying.
- :mod:`drills.kinds.baseline.runarchive`: a run archive as the other side of a comparison.
- :mod:`drills.kinds.baseline.compare`: the comparison and the contract clauses (pure).
- :mod:`drills.kinds.baseline.command`: the two commands' work, behind ``drills.cli``.
"""

from drills.kinds.baseline.errors import (BaselineError, BaselineUsageError, MethodMismatch, NotVerified,
                                          ObservationError)

__all__ = ["BaselineError", "BaselineUsageError", "MethodMismatch", "NotVerified", "ObservationError"]
