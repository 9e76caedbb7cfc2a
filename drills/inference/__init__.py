"""The inference canary: a real, standard-library-only stand-in for an LLM inference server.

Run as ``firedrill-inference serve ...`` or ``python -m drills.inference serve ...``;
the contract (command line, HTTP endpoints, metrics, log format, exit codes)
is ``docs/WORKLOAD.md``, section "The inference canary".  Like the training
canary this package imports nothing from the rest of Firedrill (an
import-linter contract in ``pyproject.toml`` keeps it so), so its image needs
only this folder and a Python interpreter.
"""
