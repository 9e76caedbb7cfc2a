"""The real Ray suite (issue 50): Ray 2.60 from PyPI, a head and worker nodes on this machine on loopback
(``tests/realray/cluster.py``), GPUs declared, none needed.  Ray lives in its own virtual environment, never
the main one: ``tests/realray/setup.sh`` makes ``.venv-ray`` (it sees the editable install), then
``.venv-ray/bin/python -m pytest tests/realray -m realray``.  Run with an interpreter without Ray, every test
skips, saying how to get it."""

from __future__ import annotations

import importlib.util
import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if importlib.util.find_spec("ray") is not None:
        return
    skip = pytest.mark.skip(reason="Ray is not importable from this interpreter: run tests/realray/setup.sh, then "
                                   ".venv-ray/bin/python -m pytest tests/realray -m realray")
    for item in items:
        if "realray" in item.keywords:
            item.add_marker(skip)


# Before any test module imports ray: a driver in this process answers 127.0.0.1 for its own address (Ray 2.60
# on Linux would pick the address it routes to the internet by, and find no raylet there: tests/realray/raynode.py)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
