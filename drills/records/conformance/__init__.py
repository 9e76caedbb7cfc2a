"""CNCF Kubernetes AI Conformance output: a verified run archive in, the program's submission folder out.

- :mod:`drills.conformance.versions`: the program's checklists (requirement ids, levels, descriptions), its
  status vocabulary and PRODUCT.yaml's metadata fields.
- :mod:`drills.conformance.judge`: a status per requirement from the run's ``@conformance:<id>`` scenarios.
- :mod:`drills.conformance.artifacts`: PRODUCT.yaml, junit.xml, e2e.log and results.json as bytes.
- :mod:`drills.conformance.submission`: ``firedrill conformance``: verify the run, write and sign the folder.
- :mod:`drills.conformance.check`: the structural check ``firedrill verify`` runs on such a folder.
- :mod:`drills.conformance.errors`: :class:`~drills.conformance.errors.ConformanceError` and its kinds.

See docs/CONFORMANCE.md.
"""
