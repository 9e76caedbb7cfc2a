"""The ``topology-blind`` defect (docs/DEFECTS.md) lives in one place: the controller process turns
``--defect topology-blind`` into the scheduler core's ``topology_blind`` switch, off otherwise; the scheduler
reads a gang's request from Kueue's pod-set annotations on each pod."""

from __future__ import annotations

from refplatform.controllers.convert import pod_of
from refplatform.core import REQUIRED_TOPOLOGY_ANNOTATION, SchedulerConfig, TopologyMode, TopologyRequest
from refplatform.defects import Defect, parse_defects

from .test_no_preemption_defect import scheduler_config

RACK = "cloud.provider.com/topology-rack"


def test_the_defect_is_named_and_switches_the_core_only_when_given() -> None:
    assert parse_defects(["topology-blind"]) == frozenset({Defect.TOPOLOGY_BLIND})
    assert SchedulerConfig().topology_blind is False
    assert scheduler_config().topology_blind is False
    assert scheduler_config("--defect", "topology-blind").topology_blind is True
    assert scheduler_config("--defect", "no-preemption").topology_blind is False


def test_the_scheduler_reads_the_gang_s_request_from_the_pod_annotation() -> None:
    base = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    assert pod_of(base).topology is None
    asked = {**base, "metadata": {**base["metadata"], "annotations": {REQUIRED_TOPOLOGY_ANNOTATION: RACK}}}
    assert pod_of(asked).topology == TopologyRequest(RACK, TopologyMode.REQUIRED)
