"""A container's process environment, as the kubelet computes it (pure).

What a container that has ``command`` runs with (docs/WORKLOAD.md, "How the
reference platform runs a container"):

- ``envFrom``: every key of a ConfigMap (``configMapRef``) or Secret
  (``secretRef``), with its ``prefix``, in order, before ``env``; a key that
  cannot be a variable name (it holds ``=``) is skipped, as the kubelet does;
- ``env``: each entry's ``value`` (in which ``$(VAR)`` names an entry defined
  earlier in the list, or a variable the agent injects), or
  ``valueFrom.fieldRef`` with one of :data:`FIELD_PATHS` (the downward API), or
  ``valueFrom.configMapKeyRef``/``secretKeyRef`` (one key); a missing object or
  key is an error naming the field unless the reference is ``optional``; any
  other ``valueFrom`` source is refused, naming the field;
- ``command`` and ``args`` with ``$(VAR)`` replaced by the container's
  environment (``$$`` is a literal ``$``; a name that is not defined stays as
  written), the way the kubelet expands them;
- ``PATH``: the directory of the agent's Python interpreter first, then the
  agent's own ``PATH``, so a console script installed next to the interpreter
  (``firedrill-canary``) resolves as it would in the canary image; an ``env``
  entry named ``PATH`` replaces it;
- ``workingDir``.

:func:`expand` follows the kubelet's expansion rules exactly; nothing here reads
the clock or does I/O.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from refplatform.agent.errors import ContainerSpecError

__all__ = [
    "FIELD_PATHS",
    "EnvSource",
    "env_sources",
    "PodFacts",
    "container_path",
    "expand",
    "field_value",
    "resolve_env",
]

Obj = dict[str, Any]

FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels['<key>']",
    "metadata.annotations['<key>']",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.hostIP",
)
"""The ``valueFrom.fieldRef.fieldPath`` values the agent resolves."""

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")

EnvSource = tuple[str, str]
"""(kind, name) of an object a container's environment reads: ``("ConfigMap", "cfg")`` or ``("Secret", "creds")``."""
KEY_REFS = {"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret"}
OBJECT_REFS = {"configMapRef": "ConfigMap", "secretRef": "Secret"}


def env_sources(pod: Obj) -> dict[EnvSource, bool]:
    """Every ConfigMap and Secret the pod's containers read into their environment, and whether each is optional
    everywhere it is named (the agent fetches them before the containers start)."""
    found: dict[EnvSource, bool] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        refs: list[Any] = []
        for entry in (c or {}).get("envFrom") or []:
            if isinstance(entry, dict):
                refs += [(OBJECT_REFS[k], v) for k, v in entry.items() if k in OBJECT_REFS]
        for entry in (c or {}).get("env") or []:
            source = entry.get("valueFrom") if isinstance(entry, dict) else None
            if isinstance(source, dict):
                refs += [(KEY_REFS[k], v) for k, v in source.items() if k in KEY_REFS]
        for kind, ref in refs:
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                key = (kind, ref["name"])
                found[key] = found.get(key, True) and ref.get("optional") is True
    return found


@dataclass(frozen=True)
class PodFacts:
    """What the downward API can tell a container about its pod."""

    name: str
    namespace: str
    uid: str
    node_name: str
    pod_ip: str
    host_ip: str
    service_account: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, pod: Obj, pod_ip: str, host_ip: str) -> PodFacts:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid") or ""),
            node_name=str(spec.get("nodeName") or ""),
            pod_ip=pod_ip,
            host_ip=host_ip,
            service_account=str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        )


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """``$(NAME)`` replaced by ``lookup(NAME)``; ``$$`` is ``$``; everything else as written.

    The kubelet's rules: a name ``lookup`` does not know (``None``) stays
    ``$(NAME)``; ``$`` before any other character, an unterminated ``$(`` and a
    trailing ``$`` are kept literally.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # escaped operator
            out.append("$")
            i += 2
            continue
        if nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:  # incomplete reference: keep "$(" and go on after it
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            value = lookup(name)
            out.append(f"$({name})" if value is None else value)
            i = close + 1
            continue
        out.append("$" + nxt)  # not a reference: the operator and the character after it
        i += 2
    return "".join(out)


def field_value(path: str, facts: PodFacts, where: str) -> str:
    """The value of a downward-API ``fieldPath``; :class:`ContainerSpecError` naming ``where`` if unsupported."""
    simple = {
        "metadata.name": facts.name,
        "metadata.namespace": facts.namespace,
        "metadata.uid": facts.uid,
        "spec.nodeName": facts.node_name,
        "spec.serviceAccountName": facts.service_account,
        "status.podIP": facts.pod_ip,
        "status.hostIP": facts.host_ip,
    }
    if path in simple:
        return simple[path]
    m = _SUBSCRIPT.match(path)
    if m:
        source = facts.labels if m.group(1) == "labels" else facts.annotations
        return source.get(m.group(2), "")
    raise ContainerSpecError(f"{where}: unsupported field path {path!r} (supported: {', '.join(FIELD_PATHS)})")


def _from_objects(container: Obj, where: str, objects: Mapping[EnvSource, Mapping[str, str] | None],
                  env: dict[str, str]) -> None:
    entries = container.get("envFrom") or []
    if not isinstance(entries, list):
        raise ContainerSpecError(f"{where}.envFrom: must be a list")
    for i, entry in enumerate(entries):
        at = f"{where}.envFrom[{i}]"
        refs = [(k, v) for k, v in (entry.items() if isinstance(entry, dict) else []) if k in OBJECT_REFS]
        if len(refs) != 1 or not isinstance(refs[0][1], dict) or not isinstance(refs[0][1].get("name"), str):
            raise ContainerSpecError(f"{at}: exactly one of configMapRef or secretRef, with a name")
        field, ref = refs[0]
        values = objects.get((OBJECT_REFS[field], ref["name"]))
        if values is None:
            if ref.get("optional") is True:
                continue
            raise ContainerSpecError(f"{at}.{field}: {OBJECT_REFS[field]} {ref['name']!r} not found")
        prefix = entry.get("prefix") or ""
        for key, value in values.items():
            if "=" not in key and key:
                env[f"{prefix}{key}"] = value


def _key_ref(source: Obj, at: str, objects: Mapping[EnvSource, Mapping[str, str] | None]) -> str | None:
    (field, ref), = [(k, v) for k, v in source.items() if k in KEY_REFS]
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not isinstance(ref.get("key"), str):
        raise ContainerSpecError(f"{at}.valueFrom.{field}: name and key required")
    kind, optional = KEY_REFS[field], ref.get("optional") is True
    values = objects.get((kind, ref["name"]))
    if values is None or ref["key"] not in values:
        if optional:
            return None
        what = f"{kind} {ref['name']!r}" if values is None else f"key {ref['key']!r} of {kind} {ref['name']!r}"
        raise ContainerSpecError(f"{at}.valueFrom.{field}: {what} not found")
    return values[ref["key"]]


def resolve_env(container: Obj, where: str, facts: PodFacts, injected: Mapping[str, str],
                objects: Mapping[EnvSource, Mapping[str, str] | None] | None = None) -> dict[str, str]:
    """The container's ``envFrom`` then ``env`` resolved in order, on top of ``injected`` (the agent's own
    variables); ``objects``: the data of the ConfigMaps and Secrets it names (:func:`env_sources`; a Secret's
    values decoded), None for one that does not exist.

    A ``value`` may reference ``injected`` variables and entries defined before it
    with ``$(NAME)``.  ``where`` is the container's field path (``spec.containers[0]``).
    """
    env = dict(injected)
    objects = objects or {}
    _from_objects(container, where, objects, env)
    entries = container.get("env") or []
    if not isinstance(entries, list):
        raise ContainerSpecError(f"{where}.env: must be a list")
    for i, entry in enumerate(entries):
        at = f"{where}.env[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ContainerSpecError(f"{at}.name: required")
        name = entry["name"]
        source = entry.get("valueFrom")
        if source is not None:
            if not isinstance(source, dict):
                raise ContainerSpecError(f"{at}.valueFrom: must be an object")
            if len(source) == 1 and next(iter(source)) in KEY_REFS:
                value = _key_ref(source, at, objects)
                if value is not None:
                    env[name] = value
                continue
            ref = source.get("fieldRef")
            others = sorted(k for k in source if k != "fieldRef")
            if ref is None:
                kinds = ", ".join(others) or "nothing"
                raise ContainerSpecError(f"{at}.valueFrom: only fieldRef, configMapKeyRef and secretKeyRef are "
                                         f"supported by the reference platform (got {kinds})")
            if others:
                raise ContainerSpecError(f"{at}.valueFrom: fieldRef may not be combined with {', '.join(others)}")
            path = ref.get("fieldPath") if isinstance(ref, dict) else None
            if not isinstance(path, str) or not path:
                raise ContainerSpecError(f"{at}.valueFrom.fieldRef.fieldPath: required")
            env[name] = field_value(path, facts, f"{at}.valueFrom.fieldRef.fieldPath")
            continue
        raw = entry.get("value", "")
        if raw is None:
            raw = ""
        if not isinstance(raw, str):
            raise ContainerSpecError(f"{at}.value: must be a string")
        env[name] = expand(raw, env.get)
    return env


def container_path(agent_path: str | None = None, python_dir: str | None = None) -> str:
    """A container's default ``PATH``: the agent interpreter's directory, then the agent's ``PATH``."""
    first = python_dir if python_dir is not None else os.path.dirname(sys.executable)
    rest = os.environ.get("PATH", os.defpath) if agent_path is None else agent_path
    parts = [first] + [p for p in rest.split(os.pathsep) if p and p != first]
    return os.pathsep.join(parts)
