"""The accelerator metrics drill (Kubernetes AI Conformance ``accelerator_metrics``; docs/METRICS.md): the platform
serves per-GPU utilization and memory for every GPU of every node, the utilization moves with a known load on
the GPU that carries it and on no other, an Xid shows on the GPU it hit, and telemetry that answers but never
moves is a failure, not a pass.

- :mod:`drills.target.gpumetrics`: the reading, from each reference node agent or the profile's Prometheus.
- :mod:`drills.kinds.telemetry.judge`: gaps in the inventory, rise, peaks elsewhere, changes, the Xid (pure).
- :mod:`drills.kinds.telemetry.canary`: the canary pod that loads one GPU and says which.
- :mod:`drills.kinds.telemetry.drill`: the drill; :mod:`drills.kinds.telemetry.steps`: its sentences.
"""
