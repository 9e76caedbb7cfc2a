"""Whose credentials the governance drill acts with, and where it finds the audit log.

The profile's ``governance`` section names them (``docs/PROFILE.md``); on the embedded reference platform
what it leaves out comes from the platform's data directory: ``tenant-a.kubeconfig``, the first
``node-<name>.kubeconfig`` and ``audit.log``.  What is found nowhere is a :class:`Missing` that names the
profile field to set, and makes only the steps that need it INCONCLUSIVE.

A connection is the official kubernetes client's (:class:`~drills.kube.driver.KubeDriver`), loaded from the
identity's kubeconfig without any request: the first request the drill makes as that identity is the one it
judges or a harmless read of its own namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from drills.errors import FiredrillError
from drills.kube.driver import KubeDriver
from drills.kube.timeline import Timeline
from drills.target.profile import GovernanceSettings

__all__ = ["EMBEDDED_TENANT", "ConnectError", "Identity", "Missing", "Resolved", "connect", "resolve"]

EMBEDDED_TENANT = "tenant-a"
"""The embedded cluster's first tenant: its kubeconfig is ``tenant-a.kubeconfig``, its user ``tenant-a``."""
NODE_USER_PREFIX = "system:node:"


@dataclass(frozen=True)
class Missing:
    """A setting the drill needs and did not find."""

    field: str
    """The profile field to set (``governance.tenant_kubeconfig``)."""
    why: str

    def message(self) -> str:
        return f"{self.why}; set {self.field} in the target profile (docs/PROFILE.md)"


@dataclass(frozen=True)
class Identity:
    """One identity the drill acts as."""

    kubeconfig: Path | None
    """None: the default kubeconfig ($KUBECONFIG or ~/.kube/config), with ``context``."""
    context: str | None
    field: str
    """The profile field that names it, for messages."""
    user: str | None = None
    """The username the API server knows it by, when known beforehand (the embedded tenant, a node)."""


@dataclass(frozen=True)
class Resolved:
    tenant: Identity | Missing
    node: Identity | Missing
    node_name: str | None
    audit_log: Path | Missing
    tenant_namespace: str | Missing
    other_namespace: str | Missing
    restricted_priority_class: str | Missing


def _path(value: str) -> Path:
    return Path(value).expanduser()


def resolve(settings: GovernanceSettings, data_dir: Path | None) -> Resolved:
    """What the drill acts with: the profile's settings, the embedded platform's data directory (``data_dir``;
    None on a real cluster) for what the profile leaves out."""
    if settings.tenant_kubeconfig is not None:
        tenant: Identity | Missing = Identity(_path(settings.tenant_kubeconfig), settings.tenant_context,
                                              "governance.tenant_kubeconfig")
    elif settings.tenant_context is not None:
        tenant = Identity(None, settings.tenant_context, "governance.tenant_context")
    elif data_dir is not None and (data_dir / f"{EMBEDDED_TENANT}.kubeconfig").is_file():
        tenant = Identity(data_dir / f"{EMBEDDED_TENANT}.kubeconfig", None, "governance.tenant_kubeconfig",
                          EMBEDDED_TENANT)
    elif data_dir is not None:
        tenant = Missing("governance.tenant_kubeconfig", f"the embedded platform wrote no "
                                                         f"{EMBEDDED_TENANT}.kubeconfig in its data directory")
    else:
        tenant = Missing("governance.tenant_kubeconfig", "no tenant credentials are configured")

    node_name = settings.node_name
    if settings.node_kubeconfig is not None and node_name is not None:
        node: Identity | Missing = Identity(_path(settings.node_kubeconfig), settings.node_context,
                                            "governance.node_kubeconfig", NODE_USER_PREFIX + node_name)
    else:
        found = sorted(data_dir.glob("node-*.kubeconfig")) if data_dir is not None else []
        if found:
            node_name = found[0].name.removeprefix("node-").removesuffix(".kubeconfig")
            node = Identity(found[0], None, "governance.node_kubeconfig", NODE_USER_PREFIX + node_name)
        else:
            node = Missing("governance.node_kubeconfig", "no node credentials are configured" if data_dir is None
                           else "the embedded platform wrote no node-<name>.kubeconfig in its data directory")

    if settings.audit_log is not None:
        audit: Path | Missing = _path(settings.audit_log)
    elif data_dir is not None:
        audit = data_dir / "audit.log"
    else:
        audit = Missing("governance.audit_log", "the API server's audit log is not configured, so no record of a "
                                                "refusal can be found")

    def named(value: str | None, key: str, what: str) -> str | Missing:
        return value if value is not None else Missing(f"governance.{key}", f"{what} is not configured")

    return Resolved(tenant, node, node_name, audit,
                    named(settings.tenant_namespace, "tenant_namespace", "the tenant's namespace"),
                    named(settings.other_namespace, "other_namespace", "another tenant's namespace"),
                    named(settings.restricted_priority_class, "restricted_priority_class",
                          "a PriorityClass the tenant may not use"))


class ConnectError(FiredrillError):
    """The identity's kubeconfig cannot be loaded (its message names the file and the field)."""


def connect(identity: Identity, timeline: Timeline) -> KubeDriver:
    """A driver acting as ``identity``, sharing the harness's timeline; no request is made."""
    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=str(identity.kubeconfig) if identity.kubeconfig else None,
                                context=identity.context, client_configuration=cfg)
    except (ConfigException, FileNotFoundError, OSError, TypeError, ValueError) as exc:
        where = identity.kubeconfig or "$KUBECONFIG or ~/.kube/config"
        context = f" (context {identity.context})" if identity.context else ""
        raise ConnectError(f"cannot load kubeconfig {where}{context} ({identity.field}): {exc}") from None
    return KubeDriver(client.ApiClient(cfg), timeline, attempts=1)
