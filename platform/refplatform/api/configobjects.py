"""Admission of the objects a workload is configured with: ConfigMap, Secret, ServiceAccount.

Upstream's rules (``pkg/apis/core/validation``: ``ValidateConfigMap``, ``ValidateSecret`` and their
updates), in upstream's words, with one difference in kind: nothing here ever puts a Secret's value into a
message.  A refused Secret names the field and the rule (``data[tls.key]: Required value``, ``data: Too
long: may not be more than 1048576 bytes``), never what was sent, so no Secret value reaches a client's
error, the API server's log or the audit log (whose records are at level Metadata: no bodies).

- Keys of ``data``/``binaryData`` are config keys (``[-._a-zA-Z0-9]+``, at most 253 characters, not ``.``
  or ``..``); a ConfigMap key may not be in both; the values together are at most 1 MiB
  (``MaxSecretSize``), a ConfigMap's counted over both maps (upstream names the whole object, ``[]``,
  for a ConfigMap too large; here it is ``data``).
- A Secret's ``stringData`` is write-only: folded into ``data`` (base64) before validation, its keys
  winning, and never stored, as upstream's conversion does.  ``data`` values must be base64.
  ``type`` defaults to ``Opaque``; the built-in types require their keys (``kubernetes.io/tls``:
  ``tls.crt`` and ``tls.key``; ``kubernetes.io/service-account-token``: the
  ``kubernetes.io/service-account.name`` annotation...).
- Updates: a Secret's ``type`` is immutable; an object with ``immutable: true`` keeps its data and its
  ``immutable`` for good.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from refplatform.api.errors import Cause

Obj = dict[str, Any]

MAX_SIZE = 1024 * 1024
"""Upstream's MaxSecretSize, also the limit of a ConfigMap's data."""
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_HELP = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                   "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
OPAQUE = "Opaque"
SERVICE_ACCOUNT_NAME = "kubernetes.io/service-account.name"
REQUIRED_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    # type: groups of keys; each group needs at least one of its keys present
    "kubernetes.io/dockercfg": ((".dockercfg",),),
    "kubernetes.io/dockerconfigjson": ((".dockerconfigjson",),),
    "kubernetes.io/basic-auth": (("username", "password"),),
    "kubernetes.io/ssh-auth": (("ssh-privatekey",),),
    "kubernetes.io/tls": (("tls.crt",), ("tls.key",)),
}
JSON_KEYS = {"kubernetes.io/dockercfg": ".dockercfg", "kubernetes.io/dockerconfigjson": ".dockerconfigjson"}
REDACTED = "<secret contents redacted>"


def _key_causes(key: str, path: str) -> list[Cause]:
    at = f"{path}[{key}]"
    if len(key) > 253:
        return [Cause(at, f'Invalid value: "{key}": must be no more than 253 characters')]
    if not CONFIG_KEY.match(key):
        return [Cause(at, f'Invalid value: "{key}": {CONFIG_KEY_HELP}')]
    if key in (".", ".."):
        return [Cause(at, f'Invalid value: "{key}": must not be \'{key}\'')]
    return []


def _map(obj: Obj, name: str) -> tuple[dict[str, Any], list[Cause]]:
    value = obj.get(name)
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [Cause(name, "Invalid value: must be a map of string keys to string values")]
    return value, []


def _decoded(value: Any, at: str) -> tuple[bytes | None, list[Cause]]:
    """A base64 value of ``data``/``binaryData`` as bytes; a cause that says where, never what, otherwise."""
    if not isinstance(value, str):
        return None, [Cause(at, "Invalid value: must be a base64-encoded string")]
    try:
        return base64.b64decode(value, validate=True), []
    except (binascii.Error, ValueError):
        return None, [Cause(at, f"Invalid value: {REDACTED}: illegal base64 data", "FieldValueInvalid")]


def validate_configmap(obj: Obj) -> list[Cause]:
    data, causes = _map(obj, "data")
    binary, more = _map(obj, "binaryData")
    causes += more
    size = 0
    for key, value in data.items():
        causes += _key_causes(key, "data")
        if not isinstance(value, str):
            causes.append(Cause(f"data[{key}]", "Invalid value: must be a string"))
            continue
        if key in binary:
            causes.append(Cause(f"data[{key}]", f'Invalid value: "{key}": duplicate of key present in binaryData'))
        size += len(value.encode())
    for key, value in binary.items():
        causes += _key_causes(key, "binaryData")
        raw, more = _decoded(value, f"binaryData[{key}]")
        causes += more
        size += len(raw or b"")
    if size > MAX_SIZE:
        causes.append(Cause("data", f"Too long: may not be more than {MAX_SIZE} bytes", "FieldValueTooLong"))
    return causes


def fold_string_data(obj: Obj) -> list[Cause]:
    """Move a Secret's write-only ``stringData`` into ``data`` (base64), its keys winning, as upstream does."""
    strings, causes = _map(obj, "stringData")
    if causes or "stringData" not in obj:
        obj.pop("stringData", None)
        return causes
    data = obj.get("data")
    if data is None or not isinstance(data, dict):
        data = obj["data"] = {} if data is None else data
    for key, value in strings.items():
        if not isinstance(value, str):
            causes.append(Cause(f"stringData[{key}]", "Invalid value: must be a string"))
        elif isinstance(data, dict):
            data[key] = base64.b64encode(value.encode()).decode()
    del obj["stringData"]
    return causes


def validate_secret(obj: Obj) -> list[Cause]:
    causes = fold_string_data(obj)
    data, more = _map(obj, "data")
    causes += more
    kind = obj.setdefault("type", OPAQUE) or OPAQUE
    if not isinstance(kind, str):
        return [*causes, Cause("type", "Invalid value: must be a string")]
    obj["type"] = kind
    size, decoded = 0, {}
    for key, value in data.items():
        causes += _key_causes(key, "data")
        raw, more = _decoded(value, f"data[{key}]")
        causes += more
        if raw is not None:
            decoded[key] = raw
            size += len(raw)
    if size > MAX_SIZE:
        causes.append(Cause("data", f"Too long: may not be more than {MAX_SIZE} bytes", "FieldValueTooLong"))
    if kind == "kubernetes.io/service-account-token":
        if not ((obj.get("metadata") or {}).get("annotations") or {}).get(SERVICE_ACCOUNT_NAME):
            causes.append(Cause(f"metadata.annotations[{SERVICE_ACCOUNT_NAME}]", "Required value",
                                "FieldValueRequired"))
    for group in REQUIRED_KEYS.get(kind, ()):
        present = [k for k in group if k in data]
        if kind == "kubernetes.io/ssh-auth":
            present = [k for k in present if decoded.get(k)]
        if not present:
            causes += [Cause(f"data[{k}]", "Required value", "FieldValueRequired") for k in group]
    json_key = JSON_KEYS.get(kind)
    if json_key and json_key in decoded:
        try:
            json.loads(decoded[json_key])
        except ValueError:
            causes.append(Cause(f"data[{json_key}]", f"Invalid value: {REDACTED}: not well-formed JSON"))
    return causes


def validate_serviceaccount(obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for field in ("secrets", "imagePullSecrets"):
        refs = obj.get(field)
        if refs is not None and not (isinstance(refs, list) and all(isinstance(r, dict) for r in refs)):
            causes.append(Cause(field, "Invalid value: must be a list of object references"))
    token = obj.get("automountServiceAccountToken")
    if token is not None and not isinstance(token, bool):
        causes.append(Cause("automountServiceAccountToken", "Invalid value: must be true or false"))
    return causes


def update_causes(kind: str, current: Obj, new: Obj) -> list[Cause]:
    """What upstream's ``Validate{ConfigMap,Secret}Update`` refuse: a changed Secret type, and any change to
    the data (or the flag) of an object that was made ``immutable``."""
    causes: list[Cause] = []
    if kind == "Secret" and (current.get("type") or OPAQUE) != (new.get("type") or OPAQUE):
        causes.append(Cause("type", f'Invalid value: "{new.get("type")}": field is immutable'))
    if current.get("immutable") is True:
        if new.get("immutable") is not True:
            causes.append(Cause("immutable", "Forbidden: field is immutable when `immutable` is set",
                                "FieldValueForbidden"))
        for field in ("data", "binaryData") if kind == "ConfigMap" else ("data",):
            if (current.get(field) or {}) != (new.get(field) or {}):
                causes.append(Cause(field, "Forbidden: field is immutable when `immutable` is set",
                                    "FieldValueForbidden"))
    return causes
