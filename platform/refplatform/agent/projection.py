"""Volumes whose files come from the API, written the way the kubelet writes them: ``projected``
(service account token, ConfigMap, Secret, downward API), ``configMap``, ``secret`` and ``downwardAPI``.

A real kube-apiserver gives every pod such a volume unless the pod (or its service account) says
``automountServiceAccountToken: false``: its ServiceAccount admission adds ``kube-api-access-<x>``, a
``projected`` volume with a bound service account token (``token``), the ``kube-root-ca.crt``
ConfigMap's ``ca.crt`` and the pod's namespace (``namespace``), mounted read-only at
``/var/run/secrets/kubernetes.io/serviceaccount`` in every container.  A node agent that refused it
could run no pod of a real cluster.

:func:`parse_sources` (pure) reads a volume's sources, refusing what the agent cannot fill with a
:class:`~refplatform.agent.errors.ContainerSpecError` naming the field (``clusterTrustBundle``,
``podCertificate``, a downward API ``resourceFieldRef``).  :class:`Projector` fetches their content
through the node's own identity, as the kubelet does:

- a token: ``POST serviceaccounts/<name>/token`` (a TokenRequest bound to the pod by name and uid, with
  the source's audience, or the API server's when none, and its ``expirationSeconds``); the Node
  authorizer and NodeRestriction allow exactly that for a pod bound to the node;
- a ConfigMap or Secret: ``GET`` it (the Node authorizer allows the ones a pod on the node refers to);
  ``items`` pick keys and paths, else every key is a file; a missing object or key is an error unless
  the source is ``optional``;
- the downward API: the pod's fields (:func:`refplatform.agent.podenv.field_value`, plus
  ``metadata.labels``/``metadata.annotations`` whole, one ``key="value"`` line each, sorted).

:func:`write_files` writes them under the volume's directory, each file atomically, with its mode
(``items[].mode``, else the volume's ``defaultMode``, else 0644).  A fetch that fails
(:class:`ProjectionError`: the object is missing, the API refused or was unreachable) writes nothing; the
pod sync retries with backoff and records a ``FailedMount`` Event, while the pod stays Pending, as the
kubelet does.  The files are written once, when the pod starts; a token is not refreshed.
"""

from __future__ import annotations

import base64
import binascii
import enum
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from refplatform.agent.errors import AgentError, ContainerSpecError
from refplatform.agent.podenv import EnvSource, PodFacts, env_sources, field_value
from refplatform.client import ApiStatusError, ApiUnreachable, resource_path

__all__ = [
    "DEFAULT_MODE",
    "FieldItem",
    "KeyItem",
    "ProjectedSource",
    "ProjectionError",
    "Projector",
    "SourceKind",
    "parse_sources",
    "write_files",
]

Obj = dict[str, Any]

DEFAULT_MODE = 0o644
"""A projected file's mode when neither the item nor the volume gives one (the API's default 420)."""
DEFAULT_TOKEN_SECONDS = 3600
VOLUME_TYPES = ("projected", "configMap", "secret", "downwardAPI")
"""The volume types this module fills."""
_REFUSED_SOURCES = ("clusterTrustBundle", "podCertificate")
_WHOLE_MAPS = ("metadata.labels", "metadata.annotations")
"""Downward API volume fields that render a whole map (a volume may, an env var may not)."""
_NO_FACTS = PodFacts(name="", namespace="", uid="", node_name="", pod_ip="", host_ip="")


class ProjectionError(AgentError):
    """A projected volume's content could not be fetched (missing object or key, refused, unreachable)."""


class SourceKind(enum.Enum):
    """Where a projected volume's files come from."""

    SERVICE_ACCOUNT_TOKEN = "serviceAccountToken"
    """A bound token of the pod's service account (TokenRequest)."""
    CONFIG_MAP = "configMap"
    """Keys of a ConfigMap in the pod's namespace."""
    SECRET = "secret"
    """Keys of a Secret in the pod's namespace."""
    DOWNWARD_API = "downwardAPI"
    """Fields of the pod itself."""


@dataclass(frozen=True)
class KeyItem:
    """One key of a ConfigMap or Secret, as a file (``items[]``)."""

    key: str
    path: str
    mode: int | None = None


@dataclass(frozen=True)
class FieldItem:
    """One field of the pod, as a file (a downward API ``items[]`` entry)."""

    field_path: str
    path: str
    mode: int | None = None


@dataclass(frozen=True)
class ProjectedSource:
    """One source of a volume's files."""

    kind: SourceKind
    where: str
    """The source's field path in the pod (for messages)."""
    name: str = ""
    """The ConfigMap or Secret."""
    items: tuple[KeyItem, ...] = ()
    """Chosen keys (empty: every key of the object)."""
    optional: bool = False
    fields: tuple[FieldItem, ...] = ()
    """Downward API files."""
    path: str = ""
    """The token's file."""
    audience: str = ""
    """The token's audience ("": the API server's own)."""
    expiration_seconds: int = DEFAULT_TOKEN_SECONDS


def _relative_path(value: object, at: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        raise ContainerSpecError(f"{at}: must be a relative path without '..' (got {value!r})")
    return posixpath.normpath(value)


def _mode(value: object, at: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ContainerSpecError(f"{at}: must be a file mode between 0 and 0777 (got {value!r})")
    return value


def _key_items(raw: object, at: str) -> tuple[KeyItem, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ContainerSpecError(f"{at}: must be a list")
    out = []
    for i, item in enumerate(raw):
        where = f"{at}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or not item["key"]:
            raise ContainerSpecError(f"{where}.key: required")
        out.append(KeyItem(item["key"], _relative_path(item.get("path"), f"{where}.path"),
                           _mode(item.get("mode"), f"{where}.mode")))
    return tuple(out)


def _field_items(raw: object, at: str) -> tuple[FieldItem, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ContainerSpecError(f"{at}: must be a list")
    out = []
    for i, item in enumerate(raw):
        where = f"{at}[{i}]"
        if not isinstance(item, dict):
            raise ContainerSpecError(f"{where}: must be an object")
        if "resourceFieldRef" in item:
            raise ContainerSpecError(f"{where}.resourceFieldRef: not supported by the reference platform's agent "
                                     "(it runs no resource limits); use fieldRef")
        ref = item.get("fieldRef")
        path = ref.get("fieldPath") if isinstance(ref, dict) else None
        if not isinstance(path, str) or not path:
            raise ContainerSpecError(f"{where}.fieldRef.fieldPath: required")
        if path not in _WHOLE_MAPS:  # refuse an unsupported field now, not when the pod starts
            field_value(path, _NO_FACTS, f"{where}.fieldRef.fieldPath")
        out.append(FieldItem(path, _relative_path(item.get("path"), f"{where}.path"),
                             _mode(item.get("mode"), f"{where}.mode")))
    return tuple(out)


def _source(kind: str, body: object, at: str) -> ProjectedSource:
    if not isinstance(body, dict):
        raise ContainerSpecError(f"{at}: must be an object")
    if kind == "serviceAccountToken":
        seconds = body.get("expirationSeconds", DEFAULT_TOKEN_SECONDS)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 600:
            raise ContainerSpecError(f"{at}.expirationSeconds: must be an integer of at least 600 (got {seconds!r})")
        audience = body.get("audience") or ""
        if not isinstance(audience, str):
            raise ContainerSpecError(f"{at}.audience: must be a string")
        return ProjectedSource(SourceKind.SERVICE_ACCOUNT_TOKEN, at, path=_relative_path(body.get("path"), f"{at}.path"),
                               audience=audience, expiration_seconds=seconds)
    if kind in ("configMap", "secret"):
        name_key = "name" if kind == "configMap" or "name" in body else "secretName"
        name = body.get(name_key)
        if not isinstance(name, str) or not name:
            raise ContainerSpecError(f"{at}.{name_key}: required")
        return ProjectedSource(SourceKind(kind), at, name=name, items=_key_items(body.get("items"), f"{at}.items"),
                               optional=body.get("optional") is True)
    return ProjectedSource(SourceKind.DOWNWARD_API, at, fields=_field_items(body.get("items"), f"{at}.items"))


def parse_sources(volume: Obj, where: str) -> tuple[tuple[ProjectedSource, ...], int | None]:
    """``(sources, defaultMode)`` of a ``projected``, ``configMap``, ``secret`` or ``downwardAPI`` volume
    (``where``: its field path, ``spec.volumes[i]``); ContainerSpecError for what the agent cannot fill."""
    kind = next(k for k in VOLUME_TYPES if k in volume)
    body = volume.get(kind)
    at = f"{where}.{kind}"
    if not isinstance(body, dict):
        raise ContainerSpecError(f"{at}: must be an object")
    mode = _mode(body.get("defaultMode"), f"{at}.defaultMode")
    if kind != "projected":
        return (_source(kind, body, at),), mode
    raw_sources = body.get("sources")
    if raw_sources is None:
        return (), mode
    if not isinstance(raw_sources, list):
        raise ContainerSpecError(f"{at}.sources: must be a list")
    out = []
    for i, raw in enumerate(raw_sources):
        src_at = f"{at}.sources[{i}]"
        if not isinstance(raw, dict):
            raise ContainerSpecError(f"{src_at}: must be an object")
        refused = [k for k in _REFUSED_SOURCES if k in raw]
        if refused:
            raise ContainerSpecError(f"{src_at}.{refused[0]}: not supported by the reference platform's agent "
                                     f"(supported: {', '.join(k.value for k in SourceKind)})")
        kinds = [k.value for k in SourceKind if k.value in raw]
        if len(kinds) != 1:
            raise ContainerSpecError(f"{src_at}: exactly one of {', '.join(k.value for k in SourceKind)} "
                                     f"(got {', '.join(sorted(raw)) or 'none'})")
        out.append(_source(kinds[0], raw[kinds[0]], f"{src_at}.{kinds[0]}"))
    return tuple(out), mode


# --- fetching ----------------------------------------------------------------------------------------


class _Client(Protocol):
    def get(self, path: str, params: Any = None) -> Obj: ...

    def create(self, path: str, body: Obj, params: Any = None) -> Obj: ...


Files = dict[str, tuple[bytes, int]]
"""Relative path -> (content, mode)."""


def _labels_file(values: Mapping[str, str]) -> bytes:
    """The downward API's rendering of a whole label or annotation map: ``key="value"`` lines, sorted."""
    def quote(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "\n".join(f'{k}="{quote(v)}"' for k, v in sorted(values.items())).encode()


class Projector:
    """Fetches a volume's files through the node's client."""

    def __init__(self, client: _Client) -> None:
        self.client = client

    def files(self, pod: Obj, sources: tuple[ProjectedSource, ...], default_mode: int | None,
              facts: PodFacts) -> Files:
        """Every file of the volume; ProjectionError naming the source when one cannot be fetched."""
        mode = DEFAULT_MODE if default_mode is None else default_mode
        out: Files = {}
        for src in sources:
            if src.kind is SourceKind.SERVICE_ACCOUNT_TOKEN:
                out[src.path] = (self._token(pod, src, facts).encode(), mode)
            elif src.kind is SourceKind.DOWNWARD_API:
                for f in src.fields:
                    out[f.path] = (self._field(f, facts, src.where), mode if f.mode is None else f.mode)
            else:
                out.update(self._keys(src, facts.namespace, mode))
        return out

    def env_objects(self, pod: Obj, namespace: str) -> dict[EnvSource, dict[str, str] | None]:
        """The data of every ConfigMap and Secret the pod's containers read into their environment (a Secret's
        values decoded), None for an optional one that does not exist; ProjectionError for a missing required
        one, so the pod waits for it as the kubelet does."""
        out: dict[EnvSource, dict[str, str] | None] = {}
        for (kind, name), optional in env_sources(pod).items():
            plural = "configmaps" if kind == "ConfigMap" else "secrets"
            try:
                obj = self.client.get(resource_path("", "v1", plural, namespace, name))
            except ApiStatusError as err:
                if err.not_found and optional:
                    out[(kind, name)] = None
                    continue
                raise ProjectionError(f"environment: {kind} {namespace}/{name}: {err}") from err
            except ApiUnreachable as err:
                raise ProjectionError(f"environment: {kind} {namespace}/{name}: {err}") from err
            source = SourceKind.CONFIG_MAP if kind == "ConfigMap" else SourceKind.SECRET
            values = self._values(obj, source, f"{kind} {namespace}/{name}", "environment")
            out[(kind, name)] = {k: v.decode("utf-8", "surrogateescape") for k, v in values.items()}
        return out

    def _token(self, pod: Obj, src: ProjectedSource, facts: PodFacts) -> str:
        path = resource_path("", "v1", "serviceaccounts", facts.namespace, facts.service_account, "token")
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [src.audience] if src.audience else [],
                         "expirationSeconds": src.expiration_seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": facts.name, "uid": facts.uid}}}
        try:
            answer = self.client.create(path, body)
        except (ApiStatusError, ApiUnreachable) as err:
            raise ProjectionError(f"{src.where}: token of service account {facts.namespace}/{facts.service_account}: "
                                  f"{err}") from err
        token = (answer.get("status") or {}).get("token")
        if not isinstance(token, str) or not token:
            raise ProjectionError(f"{src.where}: the TokenRequest for {facts.namespace}/{facts.service_account} "
                                  "came back without a token")
        return token

    @staticmethod
    def _field(item: FieldItem, facts: PodFacts, where: str) -> bytes:
        if item.field_path == "metadata.labels":
            return _labels_file(facts.labels)
        if item.field_path == "metadata.annotations":
            return _labels_file(facts.annotations)
        return field_value(item.field_path, facts, f"{where}.items[path={item.path}].fieldRef.fieldPath").encode()

    def _keys(self, src: ProjectedSource, namespace: str, mode: int) -> Files:
        plural = "configmaps" if src.kind is SourceKind.CONFIG_MAP else "secrets"
        what = f"{src.kind.value} {namespace}/{src.name}"
        try:
            obj = self.client.get(resource_path("", "v1", plural, namespace, src.name))
        except ApiStatusError as err:
            if err.not_found and src.optional:
                return {}
            raise ProjectionError(f"{src.where}: {what}: {err}") from err
        except ApiUnreachable as err:
            raise ProjectionError(f"{src.where}: {what}: {err}") from err
        values = self._values(obj, src.kind, what, src.where)
        if not src.items:
            return {key: (value, mode) for key, value in values.items()}
        out: Files = {}
        for item in src.items:
            if item.key not in values:
                if src.optional:
                    continue
                raise ProjectionError(f"{src.where}: {what} has no key {item.key!r}")
            out[item.path] = (values[item.key], mode if item.mode is None else item.mode)
        return out

    @staticmethod
    def _values(obj: Obj, kind: SourceKind, what: str, where: str) -> dict[str, bytes]:
        values: dict[str, bytes] = {}
        encoded = (obj.get("data") or {}) if kind is SourceKind.SECRET else (obj.get("binaryData") or {})
        for key, raw in encoded.items():
            try:
                values[str(key)] = base64.b64decode(str(raw), validate=True)
            except (binascii.Error, ValueError) as err:
                raise ProjectionError(f"{where}: {what} key {key!r} is not base64: {err}") from err
        if kind is SourceKind.CONFIG_MAP:
            for key, text in (obj.get("data") or {}).items():
                values[str(key)] = str(text).encode()
        return values


def write_files(directory: Path, files: Files) -> None:
    """Write the volume's files under ``directory``, each atomically with its mode."""
    directory.mkdir(parents=True, exist_ok=True)
    for rel, (content, mode) in sorted(files.items()):
        target = directory / rel
        if directory.resolve() not in target.resolve().parents:
            raise ContainerSpecError(f"projected file {rel!r} would leave its volume")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(content)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
