"""The straggler drill: one rank's GPU runs slow while nothing fails (docs/STRAGGLER.md).

- :mod:`drills.kinds.straggler.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.straggler.timing`: the job's step time and the waiting, from the canaries' step lines (pure).
- :mod:`drills.kinds.straggler.steps`: its sentences (the canary job and its checkpoint are node pull's, shared).
"""
