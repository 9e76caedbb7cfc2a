"""The gang submission drill: a gang gets all its GPUs or none, and gangs that each need more than half the
GPUs do not deadlock (docs/STEPS.md).

- :mod:`drills.kinds.gang.drill`: submit gangs, time them to run whole, name partial holds and deadlocks.
- :mod:`drills.kinds.gang.holds`: partial-hold GPU-seconds from pod state changes (pure).
- :mod:`drills.kinds.gang.steps`: its sentences.
"""
