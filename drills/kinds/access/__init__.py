"""The accelerator access drill: a pod reaches exactly the GPUs it asked for, and no other pod's (docs/ACCESS.md).

- :mod:`drills.kinds.access.drill`: the drill: probe pods on one node of whole GPUs, read through their logs.
- :mod:`drills.kinds.access.judge`: what the probes' reports prove, as pure functions.
- :mod:`drills.kinds.access.steps`: its sentences.
"""
