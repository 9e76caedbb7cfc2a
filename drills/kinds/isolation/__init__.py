"""The partition isolation drill: GPUs partitioned as MIG, time-slicing or HAMi-style shares keep the isolation
each mode promises when a tenant overruns its memory or its slice faults (docs/PARTITIONING.md).

- :mod:`drills.kinds.isolation.drill`: layouts, the tenant x probe matrix and its judgement.
- :mod:`drills.kinds.isolation.steps`: its sentences.
"""
