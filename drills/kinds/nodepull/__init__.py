"""The node pull drill: a training job survives losing the node of one worker (detect, evict, replace,
resume, each timed; lost steps; split brain).

- :mod:`drills.kinds.nodepull.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.nodepull.steps`: its sentences.
"""
