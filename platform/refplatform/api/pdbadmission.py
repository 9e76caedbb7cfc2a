"""Admission of PodDisruptionBudgets (``policy/v1``), in upstream's words (``pkg/apis/policy/validation``):
``minAvailable`` or ``maxUnavailable``, not both, each an integer >= 0 or a percentage of at most 100 %;
``unhealthyPodEvictionPolicy`` IfHealthyBudget or AlwaysAllow; ``selector`` a valid label selector."""

from __future__ import annotations

import re
from typing import Any

from refplatform.api.errors import Cause
from refplatform.selectors import LabelSelector, SelectorError

Obj = dict[str, Any]
PERCENT = re.compile(r"^[0-9]+%$")
POLICIES = ("IfHealthyBudget", "AlwaysAllow")


def _int_or_percent(value: Any, path: str) -> list[Cause]:
    if isinstance(value, bool):
        return [Cause(path, f"Invalid value: {value!r}: must be an integer or a percentage")]
    if isinstance(value, int):
        return [] if value >= 0 else [Cause(path, f"Invalid value: {value}: must be greater than or equal to 0")]
    if isinstance(value, str) and PERCENT.match(value):
        return [] if int(value[:-1]) <= 100 else [Cause(path, f'Invalid value: "{value}": must be no more than 100%')]
    return [Cause(path, f'Invalid value: "{value}": a valid percent string must be a numeric string followed by an '
                        "ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")]


def validate_pdb(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    causes: list[Cause] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(Cause("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"))
    for key in ("minAvailable", "maxUnavailable"):
        if spec.get(key) is not None:
            causes += _int_or_percent(spec[key], f"spec.{key}")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in POLICIES:
        causes.append(Cause("spec.unhealthyPodEvictionPolicy", f'Unsupported value: "{policy}": supported values: '
                                                               '"IfHealthyBudget", "AlwaysAllow"', "FieldValueNotSupported"))
    if spec.get("selector") is not None:
        try:
            LabelSelector.from_dict(spec["selector"])
        except SelectorError as exc:
            causes.append(Cause("spec.selector", f"Invalid value: {exc}"))
    return causes
