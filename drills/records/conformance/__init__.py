"""CNCF Kubernetes AI Conformance output: a verified run archive in, the program's submission folder out.

- :mod:`drills.records.conformance.versions`: the program's checklists (requirement ids, levels, descriptions), its
  status vocabulary and PRODUCT.yaml's metadata fields.
- :mod:`drills.records.conformance.judge`: a status per requirement from the run's ``@conformance:<id>`` scenarios.
- :mod:`drills.records.conformance.artifacts`: PRODUCT.yaml, junit.xml, e2e.log and results.json as bytes.
- (``firedrill conformance`` itself, which verifies the run and writes and signs the folder, is
  :mod:`drills.records.evidence.submission`: it builds on this package and on the signed archives.)
- :mod:`drills.records.conformance.check`: the structural check ``firedrill verify`` runs on such a folder.
- :mod:`drills.records.conformance.errors`: :class:`~drills.records.conformance.errors.ConformanceError` and its kinds.

See docs/CONFORMANCE.md.
"""
