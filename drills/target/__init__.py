"""The target side: what the harness acts on and how it may.

- :mod:`drills.target.profile`: the target profile (flavor, fault methods, safety, sources).
- :mod:`drills.target.connect`: a :class:`~drills.target.connect.Target`, embedded or from a kubeconfig.
- :mod:`drills.target.faults`, :mod:`drills.target.confirm`: fault methods and their confirmation by the node.
- :mod:`drills.target.safety`: eligibility, blast radius and pre-flight on real clusters.
- :mod:`drills.target.capacity`: free GPUs per schedulable node.
- :mod:`drills.target.leakreport`: the platform's leak report and Prometheus, read as the contract defines.

The Kubernetes driver itself is :mod:`drills.kube`, one layer below.
"""
