"""Kubernetes resource quantities (``500m``, ``8Gi``, ``1.5``), parsed by the kubernetes client's own
``parse_quantity``.

That function lives in ``kubernetes.utils.quantity``, a module that imports nothing but :mod:`decimal`. Importing
it the usual way first runs the ``kubernetes`` package's ``__init__``, which loads the whole generated client and
its config loaders: 165-200 ms of CPU at the start of every API server and controller process, for one function.
So the module is loaded here from the installed package's own file, alone. Where the package is imported already
(the harness's process), its loaded module is used."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = ["parse_quantity"]


def _load() -> Callable[[Any], Decimal]:
    loaded = sys.modules.get("kubernetes.utils.quantity")
    if loaded is not None:
        return loaded.parse_quantity  # type: ignore[no-any-return]
    package = importlib.util.find_spec("kubernetes")  # finds it without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("the kubernetes package is not installed: pip install kubernetes")
    path = Path(next(iter(package.submodule_search_locations))) / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location("refplatform._kubernetes_quantity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"the kubernetes package has no {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_quantity  # type: ignore[no-any-return]


parse_quantity: Callable[[Any], Decimal] = _load()
"""``kubernetes.utils.quantity.parse_quantity``: a quantity as a :class:`~decimal.Decimal`; ValueError when it is
none."""
