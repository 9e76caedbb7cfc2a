"""The GPUs a container is given, as NVIDIA's device plugin and container toolkit give them.

On a real node two parts decide what a container reaches.  The device plugin's Allocate answers, for the
container that requested GPUs, with the devices it chose (``NVIDIA_VISIBLE_DEVICES``, or one volume mount per
device under ``/var/run/nvidia-container-devices`` with the ``volume-mounts`` strategy), and the container
toolkit then puts exactly those GPUs' device nodes (``/dev/nvidiaN``) into the container; the device cgroup
refuses an ``open()`` of any other.  A container that requested no GPU is told nothing and gets no device
node, whatever its own environment asks for (the toolkit's ``accept-nvidia-visible-devices-envvar-when-
unprivileged = false``): a CUDA image's ``NVIDIA_VISIBLE_DEVICES=all`` reaches nothing.

The reference agent runs containers as plain processes, so it models the device nodes as files: each
container has a device directory of its own (:data:`DEVICE_DIR_ENV` names it, as ``/dev`` is a real
container's) holding one file per GPU it was given, named as its device node would be (``nvidia3`` for the
node's GPU 3) and holding that GPU's identity (what NVML answers for that device on a real node).  A process
that opens a GPU it was not given fails as it would in a container whose ``/dev`` lacks the node: there is
nothing to open.  The directory is written before the container's process starts.

With the ``visible-to-all`` defect every container's directory holds every GPU of its node, with or without a
request, and a container that requested none is told ``NVIDIA_VISIBLE_DEVICES=all`` (the leak of
NVIDIA/k8s-device-plugin#61 and #1605: a CUDA image's default honoured for a pod that asked for nothing).

:func:`container_devices` is pure; :func:`write_device_dir` does the one write.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refplatform.gpu.identity import visible_devices

__all__ = ["ALL_DEVICES", "DEVICE_DIR_ENV", "ContainerDevices", "DeviceGrant", "container_devices",
           "write_device_dir"]

Obj = dict[str, Any]
DEVICE_DIR_ENV = "FIREDRILL_DEVICE_DIR"
"""The variable that tells a container where its device nodes are (a real container's are in ``/dev``)."""
ALL_DEVICES = "all"
"""``NVIDIA_VISIBLE_DEVICES=all``: every GPU of the node (what CUDA images set by default)."""
DEVICE_NODE_PREFIX = "nvidia"


@dataclass(frozen=True)
class DeviceGrant:
    """One device a container is given: a whole GPU, or a slice of one (a MIG instance, a shared replica)."""

    gpu: int
    """The node's GPU it lives on: its device node is ``nvidia<gpu>``."""
    identity: str
    """What the device plugin names it by: ``GPU-<uuid>`` or ``MIG-<uuid>``."""
    resource: str
    """The extended resource it answers (``nvidia.com/gpu``, ``nvidia.com/mig-1g.18gb``, ...)."""

    @property
    def node(self) -> str:
        """The name of its device node (``nvidia3``)."""
        return f"{DEVICE_NODE_PREFIX}{self.gpu}"


@dataclass(frozen=True)
class ContainerDevices:
    """What one container is given: the variable it is told and the device nodes it can open."""

    visible: str | None
    """``NVIDIA_VISIBLE_DEVICES`` as the agent sets it (None: not set; the container's own ``env`` still applies)."""
    nodes: tuple[DeviceGrant, ...]
    """The devices whose nodes are in its device directory (several slices of one GPU share one node)."""


def _quantity(value: Any) -> int:
    try:
        return max(int(str(value)), 0)
    except ValueError:
        return 0


def _requests(container: Obj) -> dict[str, int]:
    """A container's extended resources: max(limit, request) of each."""
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    return {name: max(_quantity(limits.get(name, 0)), _quantity(requests.get(name, 0)))
            for name in {*limits, *requests} if "/" in name}


def container_devices(pod: Obj, granted: Sequence[DeviceGrant] | None, node_gpus: Sequence[DeviceGrant], *,
                      visible_to_all: bool = False) -> dict[str, ContainerDevices]:
    """Each container's devices, by container name: the pod's ``granted`` devices shared out in container order,
    each container taking as many of each resource as it requests; a container that requests none gets none.
    ``node_gpus``: every whole GPU of the node (what the ``visible-to-all`` defect gives every container)."""
    left: dict[str, list[DeviceGrant]] = {}
    for grant in granted or ():
        left.setdefault(grant.resource, []).append(grant)
    out: dict[str, ContainerDevices] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = str((c or {}).get("name") or "main")  # as the runtime names it
        own: list[DeviceGrant] = []
        for resource, count in sorted(_requests(c or {}).items()):
            pool = left.get(resource, [])
            own += pool[:count]
            left[resource] = pool[count:]
        told = visible_devices(g.identity for g in own) if own else None
        if visible_to_all:
            out[name] = ContainerDevices(told or ALL_DEVICES, tuple(node_gpus))
        else:
            out[name] = ContainerDevices(told, tuple(own))
    return out


def write_device_dir(directory: Path, devices: ContainerDevices) -> None:
    """Make ``directory`` hold exactly one node per GPU of ``devices`` (a slice's identity where its node is
    shared: the first one given), readable and writable as the device nodes the toolkit creates."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    for grant in devices.nodes:
        if grant.node in written:
            continue
        written.add(grant.node)
        path = directory / grant.node
        path.write_text(grant.identity + "\n")
        os.chmod(path, 0o666)

