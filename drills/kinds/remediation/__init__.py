"""The remediation drill: a fault many nodes report at once must not drain the fleet (docs/HEALING.md, "The
remediation budget").

- :mod:`drills.kinds.remediation.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.remediation.steps`: its sentences (the canary job and its checkpoint are node pull's, shared).

A GPU's own way back (burn-in, flapping) is the GPU fault drill's (:mod:`drills.kinds.gpufault`).
"""
