"""The control-plane drill: the Kubernetes SLOs (mutating calls, pod startup) and every acknowledged write
hold while a node is pulled (docs/CONTROL_PLANE.md).

- :mod:`drills.kinds.controlplane.drill`: the load, the timed pods, the pull and the judgement.
- :mod:`drills.kinds.controlplane.steps`: its sentences.
"""
