"""The reference platform's Xid injection: an entry in the Node's ``firedrill.dev/inject-xid`` annotation, which
the node's agent applies once (docs/PARTITIONING.md for MIG slices, docs/GPU_FAULT.md for whole GPUs) and which
keeps a whole GPU out of service for as long as it stands. A real cluster injects with the profile's ``fault.xid``
command instead, and :func:`dcgm_last_xid` asks the profile's Prometheus what DCGM saw of it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3

from drills.kube.driver import NODE, RESOURCES, KubeDriver, KubeError
from drills.target.faults import FaultError, FaultRecord, Intend, no_journal, run_site_command
from drills.target.gpuhealth import append_entry
from drills.target.profile import TargetProfile

__all__ = ["APPLICATION_XIDS", "INJECT_ANNOTATION", "NO_XID_COMMAND", "UNHEALTHY_ANNOTATION", "XID_METRIC",
           "XidCommand", "clear_xids", "dcgm_last_xid", "inject_by_command", "inject_by_uuid", "inject_xid",
           "unhealthy_gpus", "wait_seen"]

INJECT_ANNOTATION = "firedrill.dev/inject-xid"
UNHEALTHY_ANNOTATION = "firedrill.dev/unhealthy-gpus"
"""Written by the reference platform's node agent: the whole GPUs it reports out of service (``"3"``, ``"0,5"``)."""


NO_XID_COMMAND = ("this profile has no Xid injection: set fault.xid.command_template in the target profile (a "
                  "command with {node} and {xid}, aimed by {uuid}, or by {gpu} and {instance}: your site's "
                  "injector; docs/PROFILE.md, 'Xid injection')")


@dataclass(frozen=True)
class XidCommand:
    """An Xid injected on a real cluster by the profile's ``fault.xid`` command."""

    command: str
    record: FaultRecord
    """Its undo runs ``fault.xid.restore_template`` and raises :class:`FaultError` when that fails (None: none)."""
    restore: str | None
    blast_radius: str


def inject_by_command(driver: KubeDriver, profile: TargetProfile, faults_done: list[FaultRecord], node: str, xid: int,
                      *, gpu: int | None = None, instance: int | None = None, uuid: str = "",
                      intend: Intend = no_journal) -> XidCommand:
    """Inject Xid ``xid`` on ``node``'s GPU (its minor number ``gpu`` and MIG ``instance``, or its ``uuid``) with
    the profile's ``fault.xid`` command, behind the same blast-radius check as a node fault. The record joins
    ``faults_done`` before its outcome is judged, so the restore runs on every exit path. Raises
    :class:`FaultError`, saying why, when nothing was (or may have been) injected."""
    settings = profile.fault.xid
    if settings is None:
        raise FaultError(NO_XID_COMMAND)
    command = settings.command_for(node, gpu, instance, xid, uuid)
    restore = settings.restore_for(node, gpu, instance, xid, uuid)
    record, radius = run_site_command(driver, profile, faults_done, node, what=f"Xid {xid}", act=f"inject Xid {xid}",
                                      command=command,
                                      restore=restore, intend=intend,
                                      by_hand=f"reset the GPU on node {node} by hand (nvidia-smi -r): the profile "
                                              "has no fault.xid.restore_template")
    return XidCommand(command, record, restore, radius)


def inject_by_uuid(driver: KubeDriver, profile: TargetProfile, faults_done: list[FaultRecord], node: str, xid: int,
                   uuid: str, *, who: str = "the canary", intend: Intend = no_journal) -> dict[str, object]:
    """:func:`inject_by_command` aimed by the GPU's UUID alone, as a pod on a real cluster knows its GPU (``who``
    logged it from ``NVIDIA_VISIBLE_DEVICES``): what the evidence records of it. Raises :class:`FaultError` when
    the template needs ``{gpu}``, the minor number no pod reveals, or the injection cannot be made."""
    settings = profile.fault.xid
    if settings is not None and settings.uses("gpu"):
        raise FaultError("fault.xid uses {gpu}, the GPU's minor number, which a pod on a real cluster does not "
                         f"reveal to the harness; aim with {{uuid}} (the GPU's UUID, as {who} logged it)")
    done = inject_by_command(driver, profile, faults_done, node, xid, uuid=uuid, intend=intend)
    return {"method": "command", "command": done.command, "blast_radius": done.blast_radius,
            "restore": done.restore or "none: the GPU may need a reset by hand"}


def inject_xid(driver: KubeDriver, node: str, entry: dict[str, Any]) -> None:
    """Append ``entry`` (``id``, ``gpu``, ``instance`` (None: the whole GPU), ``xid``) to the node's injections."""
    append_entry(driver, node, INJECT_ANNOTATION, entry)


def clear_xids(driver: KubeDriver, node: str) -> None:
    """Remove every injection of the node (a whole GPU returns to service)."""
    driver.patch(NODE, node, {"metadata": {"annotations": {INJECT_ANNOTATION: None}}})


def unhealthy_gpus(node: dict[str, Any]) -> tuple[int, ...]:
    """The whole GPUs the node's agent reports out of service (its annotation), by index."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(UNHEALTHY_ANNOTATION) or ""
    return tuple(sorted({int(i) for i in raw.split(",") if i.strip().isdigit()}))


def _renewed(driver: KubeDriver, node: str) -> str | None:
    try:
        lease = driver.find(RESOURCES[("coordination.k8s.io/v1", "Lease")], node, "kube-node-lease")
    except KubeError:
        return None
    return str(((lease or {}).get("spec") or {}).get("renewTime") or "") or None


def wait_seen(driver: KubeDriver, node: str, mono: Any, timeout: float, beats: int = 2) -> bool:
    """Wait until the node's agent has read its Node since now: its Lease renewed ``beats`` times (the reference
    platform's agent reads its Node on every heartbeat, so a removed injection is then applied), at most
    ``timeout`` seconds on the clock ``mono``; whether it was seen."""
    deadline, last, seen = mono() + timeout, _renewed(driver, node), 0
    while seen < beats:
        if mono() >= deadline:
            return False
        threading.Event().wait(0.1)
        now = _renewed(driver, node)
        if now is not None and now != last:
            last, seen = now, seen + 1
    return True


APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
"""Xids NVIDIA's device plugin leaves a GPU in service for: the application's error, not the GPU's."""

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
"""dcgm-exporter's gauge: the value of the last Xid a GPU (label ``UUID``) encountered."""

Fetch = Callable[[str, Mapping[str, str]], tuple[int, bytes]]
"""GET ``url`` with query ``fields``: (HTTP status, body); raises urllib3's errors or OSError when unreachable."""


def dcgm_last_xid(prometheus_url: str | None, uuid: str, *, timeout: float = 10.0,
                  fetch: Fetch | None = None) -> tuple[int | None, str]:
    """The last Xid DCGM reported for the GPU ``uuid`` through Prometheus (``DCGM_FI_DEV_XID_ERRORS{UUID=...}``),
    and ``""``; or ``None`` and why it cannot be known (no Prometheus configured, unreachable, no such series).
    Any ``user:password@`` in the URL is sent as basic auth."""
    if not prometheus_url:
        return None, ("the target profile names no Prometheus (prometheus.url) to read DCGM's "
                      f"{XID_METRIC} from")
    parts = urlsplit(prometheus_url)
    base = prometheus_url.rstrip("/") if "@" not in parts.netloc else \
        f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[1]}{parts.path}".rstrip("/")
    headers = {"Accept": "application/json"}
    if "@" in parts.netloc:
        headers.update(urllib3.util.make_headers(basic_auth=unquote(parts.netloc.rsplit("@", 1)[0])))
    query = f'max({XID_METRIC}{{UUID="{uuid}"}})'

    def get(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        resp = urllib3.PoolManager().request("GET", url, fields=dict(fields), timeout=timeout, headers=headers)
        return resp.status, resp.data
    try:
        status, body = (fetch or get)(base + "/api/v1/query", {"query": query})
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        return None, f"Prometheus at {base} cannot be reached: {exc}"
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if status != 200 or not isinstance(doc, dict):
        return None, f"Prometheus at {base} answered {status} to {query!r}"
    result = (doc.get("data") or {}).get("result") or []
    if not result:
        return None, f"Prometheus at {base} has no {XID_METRIC} series for GPU {uuid} (is dcgm-exporter scraped?)"
    try:
        return int(float(result[0]["value"][1])), ""
    except (KeyError, IndexError, TypeError, ValueError):
        return None, f"Prometheus at {base} answered {query!r} with no readable value"
