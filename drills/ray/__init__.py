"""The Ray target driver (issue 50): what the harness reads from and asks of a Ray cluster, beside the Kubernetes
(:mod:`drills.kube`) and Slurm (:mod:`drills.slurm`) drivers.

- :mod:`drills.ray.state`: nodes, actors, placement groups and jobs as Ray's state and Job Submission APIs report
  them, parsed into typed records (pure).
- :mod:`drills.ray.driver`: those APIs over HTTP on the cluster's dashboard address; no ``ray`` package is needed
  on the harness's machine (docs/RAY.md, "Reading over HTTP"), and every failure is a
  :class:`~drills.ray.state.RayError` naming the request and how to fix the usual causes.
"""
