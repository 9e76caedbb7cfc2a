"""The blip drill: the control plane, or most nodes' link to it, goes away for a while (docs/BLIP.md).

- :mod:`drills.kinds.blip.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.blip.steps`: its sentences (the canary job and its checkpoint are node pull's, shared).
"""
