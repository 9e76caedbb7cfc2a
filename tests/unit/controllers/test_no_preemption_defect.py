"""The ``no-preemption`` defect (docs/DEFECTS.md) lives in one place: the controller process turns
``--defect no-preemption`` into the scheduler core's ``no_preemption`` switch, off otherwise."""

from __future__ import annotations

from refplatform.client import RestClient
from refplatform.controllers import process
from refplatform.controllers.convert import pod_of
from refplatform.core import PreemptionPolicy
from refplatform.defects import Defect, parse_defects


def scheduler_config(*argv: str):
    client = RestClient("https://127.0.0.1:1")  # never called: building a controller sends nothing
    try:
        controller = process.FACTORIES["scheduler"](client, process.build_parser().parse_args(["--api", "x", *argv]))
    finally:
        client.close()
    return controller.config  # type: ignore[attr-defined]


def test_the_defect_is_named_and_switches_the_core_off_only_when_given() -> None:
    assert parse_defects(["no-preemption"]) == frozenset({Defect.NO_PREEMPTION})
    assert "never evicts" in Defect.NO_PREEMPTION.summary
    assert scheduler_config().no_preemption is False
    assert scheduler_config("--defect", "no-preemption").no_preemption is True
    assert scheduler_config("--defect", "partial-gang-bind").no_preemption is False


def test_the_scheduler_reads_the_pods_preemption_policy() -> None:
    base = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [], "priority": 5}}
    assert pod_of(base).preemption_policy is PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    never = {**base, "spec": {**base["spec"], "preemptionPolicy": "Never"}}
    assert (pod_of(never).preemption_policy, pod_of(never).priority) == (PreemptionPolicy.NEVER, 5)
