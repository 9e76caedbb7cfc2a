"""The harness's side of the workloads it ships: the manifests that run them and the readers of what they log.

- :mod:`drills.workloads.canaryjob`: the training canary as a Volcano Job or a batch/v1 Indexed Job.
- :mod:`drills.workloads.canarylog`: the canary's JSON lines, read through ``pods/log``.
- :mod:`drills.workloads.training`: a canary training job started, followed, and timed through a node fault.
- :mod:`drills.workloads.probe`: the isolation probe program and its report lines.
- :mod:`drills.workloads.gangs`: what a drill that submits gangs asks of a real cluster.

The programs themselves are :mod:`drills.canary` and :mod:`drills.inference` (standard library only; their
import paths are baked into the images built from their Containerfiles, so they stay where they are), and the
load users are :mod:`drills.load`.
"""
