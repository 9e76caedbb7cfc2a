"""Signed evidence: every run leaves an archive a skeptic can verify offline.

- :mod:`drills.evidence.record`: what a run established, as plain typed data (the input to everything else).
"""
