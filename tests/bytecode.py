"""Byte-compile the repository's packages before the tests (or a benchmark) start their processes.

The suite starts thousands of Python processes: API servers, controllers, node agents, canary ranks, harness
workers.  Where ``PYTHONDONTWRITEBYTECODE`` is set (CI machines set it) and the packages are installed editable,
nothing writes their bytecode, so every one of those processes compiled every module it imported: about a
fifth of a second of CPU for an API server or a harness worker, an eighth for a node agent.  An installed
wheel has its bytecode already (pip compiles at install); this gives the checkout the same, in under a second.
"""

from __future__ import annotations

import compileall
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (REPO / "drills", REPO / "platform" / "refplatform")


def compile_packages() -> bool:
    """Write the bytecode of every module of the repository's packages (quietly); True when all compiled."""
    return all(compileall.compile_dir(str(path), quiet=1, workers=0) for path in PACKAGES)
