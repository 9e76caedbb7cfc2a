"""``firedrill rbac`` and the run's access pre-flight: the permissions the chosen features need on a cluster.

Both start from the same computation (:func:`needed`): the scenarios' sentences name the drill kinds and fault
methods (:mod:`drills.scenario.needs`), and each kind states its permissions for the profile.  ``firedrill rbac``
prints them as the least-privilege Role and ClusterRole; ``firedrill run`` asks the API server about each one
before any other request (:class:`drills.target.connect.AccessCheck`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from drills.bdd.features import FeatureInfo
from drills.scenario import needs
from drills.target.access import Permission, Subject, role_manifests
from drills.target.profile import TargetProfile


def needed(features: list[FeatureInfo], profile: TargetProfile) -> list[Permission]:
    """Every permission the features' scenarios need on a real cluster run with ``profile``."""
    scenarios = [needs.needs_of(sc.steps) for f in features for sc in f.scenarios]
    return needs.permissions(scenarios, profile)


def default_subject(profile: TargetProfile) -> Subject:
    """The ServiceAccount the docs create for the harness: ``firedrill`` in the profile's namespace."""
    return Subject("firedrill", profile.namespace)


def render(permissions: list[Permission], subject: Subject, *, source: str) -> str:
    """The Role/ClusterRole and bindings as YAML, headed by one comment line per permission saying why."""
    head = [f"# Least-privilege RBAC for Firedrill ({source}), bound to {subject.describe()}.",
            "# Apply as a cluster admin: kubectl apply -f <this file>. What each rule is for:"]
    rules: dict[tuple[str, str, str], tuple[list[str], list[str]]] = {}
    for p in permissions:
        verbs, whys = rules.setdefault((p.namespace, p.group, p.resource_name), ([], []))
        verbs.append(p.verb)
        whys += [w for w in p.why.split("; ") if w not in whys]
    for (ns, group, resource), (verbs, whys) in rules.items():
        where = f"in {ns}" if ns else "cluster-wide"
        head.append(f"#   {resource}{'.' + group if group else ''} {where} ({', '.join(verbs)}): {'; '.join(whys)}")
    docs = yaml.safe_dump_all(role_manifests(permissions, subject), sort_keys=False, default_flow_style=False)
    return "\n".join(head) + "\n---\n" + docs


def rbac_command(profile_path: Path | None, features_dir: Path, subject: Subject | None = None) -> str:
    """The ``firedrill rbac`` line that prints the Role for this run."""
    parts = ["firedrill", "rbac", "--profile", str(profile_path or "PROFILE.yaml"), "--features", str(features_dir)]
    if subject is not None:
        parts += ["--subject", subject.describe()]
    return shlex.join(parts)
