"""The platform's leak report as the harness reads it (docs/LEAK_REPORT.md).

- :mod:`drills.target.leakreport.model`: the four holes and a reading of the report.
- :mod:`drills.target.leakreport.source`: where it is read (API server path, a configured URL, Prometheus).
- :mod:`drills.target.leakreport.promql`: the report computed from DCGM and kube-state-metrics series.
"""
