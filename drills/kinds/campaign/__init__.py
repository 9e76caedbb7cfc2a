"""The campaign: a seeded fault mix under a training job, judged by effective training time (docs/CAMPAIGN.md).

- :mod:`drills.kinds.campaign.drill`: the drill, over :class:`drills.workloads.training.TrainingRun`.
- :mod:`drills.kinds.campaign.steps`: its sentences (the canary job and its checkpoint are node pull's, shared).
"""
