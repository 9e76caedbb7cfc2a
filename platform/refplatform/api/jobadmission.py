"""Admission of ``batch/v1`` Jobs: upstream's defaults and the validation rules a user meets first, in upstream's
words (``pkg/apis/batch/validation``, ``pkg/registry/batch/job/strategy.go``).

Defaults: ``parallelism`` 1 and ``completions`` 1 when neither is given, ``completionMode`` NonIndexed,
``backoffLimit`` 6 (unbounded with ``backoffLimitPerIndex``), ``suspend`` false, ``podReplacementPolicy``
TerminatingOrFailed (Failed with a ``podFailurePolicy``), ``manualSelector`` unset; on create the selector
``batch.kubernetes.io/controller-uid: <uid>`` and the pod labels ``batch.kubernetes.io/controller-uid``,
``batch.kubernetes.io/job-name``, ``controller-uid``, ``job-name`` (:func:`select_own_pods`).

Refused: a restart policy other than Never or OnFailure; negative counts; Indexed without ``completions``;
``backoffLimitPerIndex`` or ``maxFailedIndexes`` without Indexed; a pod failure policy without restart policy
Never; and on update a changed selector, completion mode, or pod template (unless the Job is suspended).
"""

from __future__ import annotations

from typing import Any

from refplatform.api.errors import Cause

Obj = dict[str, Any]
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
RESTART_POLICIES = ("OnFailure", "Never")
ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


def _nonnegative(spec: Obj, key: str) -> list[Cause]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [Cause(f"spec.{key}", f"Invalid value: {value!r}: must be an integer")]
    if value < 0:
        return [Cause(f"spec.{key}", f"Invalid value: {value}: must be greater than or equal to 0")]
    return []


def validate_job(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("spec", "Required value", "FieldValueRequired")]
    if spec.get("parallelism") is None and spec.get("completions") is None:
        spec["parallelism"] = spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("backoffLimit", 6 if spec.get("backoffLimitPerIndex") is None else 2**31 - 1)
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    causes: list[Cause] = []
    for key in ("parallelism", "completions", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
                "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        causes += _nonnegative(spec, key)
    mode = spec["completionMode"]
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(Cause("spec.completionMode", f'Unsupported value: "{mode}": supported values: "NonIndexed", '
                                                   '"Indexed"', "FieldValueNotSupported"))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(Cause("spec.completions", "Required value: when completion mode is Indexed",
                            "FieldValueRequired"))
    if mode != "Indexed":
        for key in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if spec.get(key) is not None:
                causes.append(Cause(f"spec.{key}", "Forbidden: requires indexed completion mode",
                                    "FieldValueForbidden"))
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return [*causes, Cause("spec.template", "Required value", "FieldValueRequired")]
    restart = template["spec"].get("restartPolicy")
    if restart is None:
        causes.append(Cause("spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"',
                            "FieldValueRequired"))
    elif restart not in RESTART_POLICIES:
        causes.append(Cause("spec.template.spec.restartPolicy", f'Unsupported value: "{restart}": supported '
                                                                'values: "OnFailure", "Never"', "FieldValueNotSupported"))
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        if restart != "Never":
            causes.append(Cause("spec.podFailurePolicy", "Invalid value: only \"Never\" is supported for "
                                                         "spec.template.spec.restartPolicy when podFailurePolicy "
                                                         "is specified"))
        for i, rule in enumerate((policy or {}).get("rules") or []):
            if not isinstance(rule, dict) or rule.get("action") not in ACTIONS:
                action = rule.get("action") if isinstance(rule, dict) else rule
                causes.append(Cause(f"spec.podFailurePolicy.rules[{i}].action",
                                    f'Unsupported value: "{action}": supported values: '
                                    + ", ".join(f'"{a}"' for a in ACTIONS), "FieldValueNotSupported"))
    return causes


def select_own_pods(obj: Obj, uid: str) -> None:
    """On create (the uid known): the selector and pod labels that tie the Job to its pods."""
    spec, name = obj["spec"], obj["metadata"]["name"]
    if spec.get("manualSelector"):
        return
    spec["selector"] = {"matchLabels": {CONTROLLER_UID: uid}}
    tmeta = spec["template"].setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), CONTROLLER_UID: uid, JOB_NAME: name,
                       "controller-uid": uid, "job-name": name}


def update_causes(current: Obj, new: Obj) -> list[Cause]:
    old_spec, spec = current.get("spec") or {}, new.get("spec") or {}
    causes = []
    for key in ("selector", "completionMode"):
        if spec.get(key) != old_spec.get(key):
            causes.append(Cause(f"spec.{key}", "Invalid value: field is immutable"))
    if spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
        causes.append(Cause("spec.template", "Invalid value: field is immutable"))
    return causes
