"""The ``topology-blind`` and ``topology-lost-on-restart`` defects (docs/DEFECTS.md) live in one place each: the
controller process turns ``--defect NAME`` into the scheduler core's switch of that name, off otherwise; the
scheduler reads a gang's request from Kueue's pod-set annotations on each pod, and its incarnation from Volcano's
job version."""

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


def test_the_lost_on_restart_defect_switches_only_its_own_core_flag() -> None:
    assert parse_defects(["topology-lost-on-restart"]) == frozenset({Defect.TOPOLOGY_LOST_ON_RESTART})
    assert SchedulerConfig().topology_lost_on_restart is False
    on = scheduler_config("--defect", "topology-lost-on-restart")
    assert on.topology_lost_on_restart is True and on.topology_blind is False
    assert scheduler_config("--defect", "topology-blind").topology_lost_on_restart is False


def test_a_pod_s_generation_is_its_volcano_job_version() -> None:
    base = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    assert pod_of(base).generation == 0
    for raw, generation in (("0", 0), ("2", 2), ("x", 0), ("", 0)):
        pod = {**base, "metadata": {**base["metadata"], "annotations": {"volcano.sh/job-version": raw}}}
        assert pod_of(pod).generation == generation
