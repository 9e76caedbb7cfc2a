"""Pod volumes on the reference platform: directories, and paths rewritten into them.

There are no mount namespaces: a container's process sees the node's file
system.  The agent gives each volume a directory and maps a ``volumeMount`` by
rewriting every value of the container's ``command``, ``args``, ``env`` and its
``workingDir`` that **equals or lies under** the ``mountPath`` (whole values
only: ``/ckpt`` and ``/ckpt/run-1`` are rewritten, ``--dir=/ckpt`` is not; pass
paths as separate arguments or through ``env``).  ``subPath`` is honoured;
``readOnly`` is not enforced (the directory stays writable).  A ``mountPath`` of
``/`` or a relative one is refused.

=============  ====================================================================
volume         directory
=============  ====================================================================
``emptyDir``   ``<data-dir>/nodes/<node>/pods/<pod uid>/volumes/<name>``: one per pod,
               kept across container restarts, removed when the pod is deleted
``hostPath``   ``<data-dir>/nodes/<node>/host/<path>``: this node's own "host" file
               system, never the real host path
``nfs``        ``<data-dir>/nfs/<server>/<path>``: one directory shared by every agent
               of the cluster (the reference platform's NFS server); with the
               ``lose-checkpoint`` defect ``<data-dir>/nodes/<node>/nfs/<server>/<path>``,
               so each node sees its own copy
``projected``,  ``<data-dir>/nodes/<node>/pods/<pod uid>/volumes/<name>``, filled from the
``configMap``,  API when the pod starts (:mod:`refplatform.agent.projection`: a service
``secret``,     account token, ConfigMap and Secret keys, downward API fields); a real
``downwardAPI`` kube-apiserver adds such a volume (``kube-api-access-<x>``) to every pod
=============  ====================================================================

Any other volume type is refused when a container mounts it (naming the
field); volumes no container mounts are ignored.  Everything here is pure
except :meth:`NodeDirs.prepare` and :meth:`NodeDirs.remove_pod`.
"""

from __future__ import annotations

import enum
import posixpath
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.projection import VOLUME_TYPES, ProjectedSource, parse_sources
from refplatform.defects import Defect

__all__ = ["Mount", "NodeDirs", "Volume", "VolumeKind", "container_mounts", "pod_volumes", "rewrite"]

Obj = dict[str, Any]

_SERVER = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
_NOT_CREATED = frozenset({"File", "Socket", "CharDevice", "BlockDevice"})
"""``hostPath.type`` values whose path is not a directory the agent may create."""


class VolumeKind(enum.Enum):
    """The volume types the reference platform runs."""

    EMPTY_DIR = "emptyDir"
    """Scratch space of one pod."""
    HOST_PATH = "hostPath"
    """A path of the node (mapped under the node's own root)."""
    NFS = "nfs"
    """A directory every node of the cluster reaches."""
    PROJECTED = "projected"
    """Files from the API (service account token, ConfigMap, Secret, downward API), written at pod start."""
    CONFIG_MAP = "configMap"
    """A ConfigMap's keys as files."""
    SECRET = "secret"
    """A Secret's keys as files."""
    DOWNWARD_API = "downwardAPI"
    """The pod's own fields as files."""


@dataclass(frozen=True)
class Volume:
    """One volume of a pod and the directory that holds it."""

    name: str
    kind: VolumeKind
    directory: Path
    create: bool = True
    """Whether :meth:`NodeDirs.prepare` creates the directory (not for ``hostPath`` files, sockets, devices)."""
    sources: tuple[ProjectedSource, ...] = ()
    """Where the files of a projected, configMap, secret or downwardAPI volume come from."""
    default_mode: int | None = None
    """Their ``defaultMode``."""

    @property
    def projected(self) -> bool:
        """Whether the agent fills this volume from the API before the pod starts."""
        return self.kind.value in VOLUME_TYPES


@dataclass(frozen=True)
class Mount:
    """A ``volumeMount`` of one container: values at or under ``mount_path`` are rewritten to ``directory``."""

    mount_path: str
    directory: Path
    read_only: bool = False


def _relative(path: str) -> str:
    """``path`` made relative and normalised, so it cannot climb out of the directory it is joined to."""
    return posixpath.normpath("/" + path).lstrip("/")


@dataclass(frozen=True)
class NodeDirs:
    """Where one node keeps its pods' files, under the platform's data directory."""

    data_dir: Path
    node: str
    defects: frozenset[Defect] = frozenset()

    @property
    def root(self) -> Path:
        return self.data_dir / "nodes" / self.node

    def pod_dir(self, uid: str) -> Path:
        if not uid or "/" in uid or uid in (".", ".."):
            raise ContainerSpecError(f"metadata.uid: {uid!r} cannot name a directory")
        return self.root / "pods" / uid

    def container_dir(self, uid: str, container: str) -> Path:
        """A container's default working directory (its own, empty at first)."""
        return self.pod_dir(uid) / "containers" / container

    def device_dir(self, uid: str, container: str) -> Path:
        """A container's device directory: the GPU device nodes it was given (:mod:`refplatform.agent.devnodes`)."""
        return self.pod_dir(uid) / "dev" / container

    def host_path(self, path: str) -> Path:
        return self.root / "host" / _relative(path)

    def nfs_dir(self, server: str, path: str) -> Path:
        base = self.root / "nfs" if Defect.LOSE_CHECKPOINT in self.defects else self.data_dir / "nfs"
        return base / server / _relative(path)

    def prepare(self, volumes: Iterable[Volume]) -> None:
        """Create the volumes' directories (idempotent)."""
        for v in volumes:
            if v.create:
                v.directory.mkdir(parents=True, exist_ok=True)
            else:
                v.directory.parent.mkdir(parents=True, exist_ok=True)

    def remove_pod(self, uid: str) -> None:
        """Remove a deleted pod's directory: its emptyDirs and the containers' working directories."""
        shutil.rmtree(self.pod_dir(uid), ignore_errors=True)

    def pod_uids(self) -> list[str]:
        """The uids that have a pod directory on this node (to collect those of pods deleted meanwhile)."""
        try:
            return sorted(p.name for p in (self.root / "pods").iterdir() if p.is_dir())
        except FileNotFoundError:
            return []


def pod_volumes(pod: Obj, dirs: NodeDirs) -> tuple[dict[str, Volume], dict[str, str]]:
    """``(volumes by name, problems by name)``: the supported volumes, and why each other one is not.

    A problem only matters when a container mounts that volume.
    """
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    out: dict[str, Volume] = {}
    problems: dict[str, str] = {}
    for i, raw in enumerate((pod.get("spec") or {}).get("volumes") or []):
        where = f"spec.volumes[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise ContainerSpecError(f"{where}.name: required")
        name = raw["name"]
        if "emptyDir" in raw:
            out[name] = Volume(name, VolumeKind.EMPTY_DIR, dirs.pod_dir(uid) / "volumes" / _relative(name))
        elif "hostPath" in raw:
            source = raw.get("hostPath") or {}
            path = source.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                problems[name] = f"{where}.hostPath.path: must be an absolute path (got {path!r})"
                continue
            out[name] = Volume(name, VolumeKind.HOST_PATH, dirs.host_path(path),
                               create=str(source.get("type") or "") not in _NOT_CREATED)
        elif "nfs" in raw:
            source = raw.get("nfs") or {}
            server, path = source.get("server"), source.get("path")
            if not isinstance(server, str) or not _SERVER.match(server):
                problems[name] = f"{where}.nfs.server: {server!r} is not a host name or address"
                continue
            if not isinstance(path, str) or not path.startswith("/"):
                problems[name] = f"{where}.nfs.path: must be an absolute path (got {path!r})"
                continue
            out[name] = Volume(name, VolumeKind.NFS, dirs.nfs_dir(server, path))
        elif any(k in raw for k in VOLUME_TYPES):
            try:
                sources, mode = parse_sources(raw, where)
            except ContainerSpecError as err:
                problems[name] = str(err)
                continue
            kind = VolumeKind(next(k for k in VOLUME_TYPES if k in raw))
            out[name] = Volume(name, kind, dirs.pod_dir(uid) / "volumes" / _relative(name), sources=sources,
                               default_mode=mode)
        else:
            kinds = sorted(k for k in raw if k != "name")
            problems[name] = (f"{where}: volume type {', '.join(kinds) or '(none)'} is not supported by the "
                              f"reference platform (supported: {', '.join(k.value for k in VolumeKind)})")
    return out, problems


def container_mounts(container: Obj, where: str, volumes: Mapping[str, Volume],
                     problems: Mapping[str, str]) -> list[Mount]:
    """The container's ``volumeMounts`` as :class:`Mount` objects, longest ``mountPath`` first."""
    mounts: list[Mount] = []
    seen: set[str] = set()
    for i, raw in enumerate(container.get("volumeMounts") or []):
        at = f"{where}.volumeMounts[{i}]"
        if not isinstance(raw, dict):
            raise ContainerSpecError(f"{at}: must be an object")
        name, path = raw.get("name"), raw.get("mountPath")
        if name in problems:
            raise ContainerSpecError(problems[str(name)])
        if name not in volumes:
            raise ContainerSpecError(f"{at}.name: no volume named {name!r} in spec.volumes")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ContainerSpecError(f"{at}.mountPath: must be an absolute path (got {path!r})")
        norm = posixpath.normpath(path)
        if norm == "/":
            raise ContainerSpecError(f"{at}.mountPath: / cannot be mounted on the reference platform "
                                     "(paths are rewritten, and every path lies under /)")
        if norm in seen:
            raise ContainerSpecError(f"{at}.mountPath: {norm} is mounted twice")
        seen.add(norm)
        directory = volumes[str(name)].directory
        sub = raw.get("subPath")
        if sub:
            if not isinstance(sub, str) or sub.startswith("/") or ".." in sub.split("/"):
                raise ContainerSpecError(f"{at}.subPath: must be a relative path without '..' (got {sub!r})")
            directory = directory / _relative(sub)
        mounts.append(Mount(norm, directory, bool(raw.get("readOnly"))))
    return sorted(mounts, key=lambda m: len(m.mount_path), reverse=True)


def rewrite(value: str, mounts: Iterable[Mount]) -> str:
    """``value`` with its mount path replaced by the volume's directory if it equals or lies under one.

    ``mounts`` longest first (as :func:`container_mounts` returns them), so a
    nested mount wins over the one it lies in.  Applied once per value.
    """
    for m in mounts:
        if value == m.mount_path:
            return str(m.directory)
        if value.startswith(m.mount_path + "/"):
            return str(m.directory) + value[len(m.mount_path):]
    return value
