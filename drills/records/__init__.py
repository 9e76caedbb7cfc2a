"""The records: what a run leaves behind and what is computed from it afterwards.

- :mod:`drills.records.verdict`: thresholds, measurements and the verdict of one scenario.
- :mod:`drills.records.evidence`: the signed archive, report.html, JUnit and Allure, the ledger.
- :mod:`drills.records.trend`: measures across the ledger's runs.
- :mod:`drills.records.conformance`: the CNCF AI Conformance folder from a verified run.
- :mod:`drills.records.score`: severities and the resilience score.

Records never import a drill kind, the runner or the target side (an import-linter contract says so).
"""
