"""The training canary: a real, standard-library-only stand-in for a distributed training job.

Run as ``firedrill-canary train ...`` or ``python -m drills.canary train ...``;
the contract (command line, environment, log format, exit codes) is
``docs/WORKLOAD.md``.  This package imports nothing from the rest of Firedrill
(an import-linter contract in ``pyproject.toml`` keeps it so), so its image
needs only this folder and a Python interpreter.
"""
