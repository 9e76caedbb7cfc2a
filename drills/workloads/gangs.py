"""What a drill that submits gangs of canary ranks asks of a real cluster: the permissions, in one place.

The gang drill and the topology drill both submit gangs in the target's flavor (the plain form: the group object
beside its pods, :data:`drills.kube.flavors.GROUP_OBJECTS`), read every node's free GPUs first and delete all
they made on rollback.
"""

from __future__ import annotations

from drills.kube.flavors import GROUP_OBJECTS
from drills.target.access import CLUSTER, Permission, grant
from drills.target.profile import TargetProfile

__all__ = ["gang_permissions"]


def gang_permissions(profile: TargetProfile, why: str) -> list[Permission]:
    """Pods in the profile's namespace (made, watched, deleted), the nodes and every namespace's pods (free
    capacity), and the flavor's group objects."""
    ns = profile.namespace
    out = grant(ns, "", "pods", ("get", "list", "watch", "create", "delete"), why)
    out += grant(CLUSTER, "", "nodes", ("list",), f"{why}: free capacity")
    out += grant(CLUSTER, "", "pods", ("list",), f"{why}: free capacity (GPUs held in every namespace)")
    for group, resource, verbs in GROUP_OBJECTS[profile.flavor]:
        out += grant(ns, group, resource, verbs, f"{why}: the {profile.flavor.value} gang's group object")
    return out
