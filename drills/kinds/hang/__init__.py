"""The hang drill: training that stops making progress without crashing, and pauses that must not be taken for it
(docs/HANG.md).

- :mod:`drills.kinds.hang.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.workloads.progress`: when the job last made progress, from the canaries' own lines (pure).
- :mod:`drills.kinds.hang.steps`: its sentences (the canary job and its checkpoint are node pull's, shared).
"""
