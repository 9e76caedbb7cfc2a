"""The profile's governance section: what it takes, its defaults, and each mistake named with its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drills.target.profile import GovernanceSettings, load_profile, reference_profile
from tests.unit.drills.test_target import MINIMAL, problems_of, write

REPO = Path(__file__).resolve().parents[3]


def test_the_complete_example_sets_every_governance_field() -> None:
    gov = load_profile(REPO / "examples" / "profile-volcano.yaml").governance
    assert gov == GovernanceSettings("tenant-a.kubeconfig", "tenant-a", "team-a", "team-b", "gpu-critical",
                                     "node-gpu-7.kubeconfig", "system-node-gpu-7", "gpu-7",
                                     "/mnt/cp-0/var/log/kubernetes/audit.log", 10.0)


def test_without_the_section_every_field_is_unset_and_the_drill_says_which_to_set(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, MINIMAL))
    assert profile.governance == GovernanceSettings()
    assert profile.to_dict()["governance"] == {"record_wait_seconds": 10.0}


def test_the_reference_profile_names_the_embedded_cluster_s_tenants_and_class() -> None:
    gov = reference_profile().governance
    assert (gov.tenant_namespace, gov.other_namespace, gov.restricted_priority_class) == (
        "firedrill-tenant", "firedrill-neighbour", "firedrill-critical")
    assert gov.tenant_kubeconfig is None and gov.audit_log is None  # the data directory's, when the drill runs


ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown field", {"tenant_kubconfig": "x"}, "governance.tenant_kubconfig: unknown field; did you mean "
                                                 "'tenant_kubeconfig'?"),
    ("a namespace that is no DNS label", {"tenant_namespace": "Team_A"}, "governance.tenant_namespace: 'Team_A' is "
                                                                          "not a namespace name"),
    ("the other namespace is the tenant's", {"tenant_namespace": "a", "other_namespace": "a"},
     "governance.other_namespace: 'a' is the tenant's own namespace"),
    ("node credentials without the node", {"node_kubeconfig": "n.kubeconfig"},
     "governance.node_name: required with governance.node_kubeconfig"),
    ("a node without credentials", {"node_name": "gpu-1"}, "governance.node_name: required with "
                                                           "governance.node_kubeconfig (and only with it)"),
    ("a node context without its kubeconfig", {"node_context": "n"}, "governance.node_context: set, but "
                                                                     "governance.node_kubeconfig is not"),
    ("no wait", {"record_wait_seconds": 0}, "governance.record_wait_seconds: 0 must be above 0"),
    ("an empty path", {"audit_log": ""}, "governance.audit_log: is empty"),
    ("a path that is no string", {"audit_log": 3}, "governance.audit_log: expected the path of the API server's "
                                                   "audit log, got an integer"),
    ("not a mapping", "tenant-a", "governance: expected a mapping of tenant_kubeconfig"),
]


@pytest.mark.parametrize("section,problem", [pytest.param(s, p, id=i) for i, s, p in ERRORS])
def test_each_mistake_names_its_field(tmp_path: Path, section: Any, problem: str) -> None:
    problems = problems_of(tmp_path, {**MINIMAL, "governance": section})
    assert any(problem in p for p in problems), problems
