"""The GPU fault drill: one rank's GPU fails while its node lives (docs/GPU_FAULT.md).

- :mod:`drills.kinds.gpufault.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.gpufault.steps`: its sentences (the canary job, its checkpoint, detect, resume, total and
  lost steps are node pull's sentences, shared).
"""
