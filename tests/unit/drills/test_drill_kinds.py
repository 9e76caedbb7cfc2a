"""One shape for every drill: each kind registers itself, the scenario context starts and rolls back whatever
kinds a scenario uses, and sentences tell each other apart without a central table."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Sequence
from typing import ClassVar

import pytest

import drills.bdd.steps as steps_plugin
import drills.kinds
from drills.errors import PlaceholderError
from drills.records.verdict import DrillResult
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import KINDS, Drill, Loaded, register
from drills.scenario.vocabulary import SENTENCES, VOCABULARY, Checked, Requires, check_scenario, sentence_of
from drills.target.profile import reference_profile


class FakeTarget:
    """Only what the context itself touches: undoing faults, putting the spare pool back and stopping watches
    (the drills below act on nothing)."""

    def __init__(self) -> None:
        self.profile = reference_profile()  # a Kubernetes target: every kind drills itself
        self.stopped = 0
        self.restored = 0
        self.roles_restored = 0

    def stop_watches(self) -> None:
        self.stopped += 1

    def restore_all(self) -> None:
        self.restored += 1

    def settle_gpus(self) -> None:
        assert self.restored, "the GPUs settle once the faults are undone"

    def restore_roles(self) -> None:
        assert self.restored, "the faults are undone before the roles are put back"
        self.roles_restored += 1


ROLLED_BACK: list[str] = []


@register
@dataclasses.dataclass
class FirstDrill(Drill):
    kind: ClassVar[str] = "test-first"

    def rollback(self) -> None:
        ROLLED_BACK.append(self.kind)
        raise RuntimeError("a rollback that fails must not keep the others from running")


@register
@dataclasses.dataclass
class LoadedDrill(Drill):
    kind: ClassVar[str] = "test-loaded"
    went_on: float = 0.0

    def go_on(self, seconds: float) -> None:
        self.went_on = seconds

    def rollback(self) -> None:
        ROLLED_BACK.append(self.kind)


@pytest.fixture(autouse=True)
def _fresh_rollbacks() -> None:
    ROLLED_BACK.clear()


def context() -> ScenarioContext:
    return ScenarioContext(FakeTarget(), DrillResult("scenario"))  # type: ignore[arg-type]


def test_every_kind_package_registers_its_drill_and_has_sentences() -> None:
    packages = sorted(i.name for i in pkgutil.iter_modules(drills.kinds.__path__) if i.ispkg)
    assert packages == ["access", "baseline", "blip", "campaign", "controlplane", "fabric", "gang", "governance", "gpufault", "hang",
                        "isolation", "leak", "nodepull", "remediation", "serving", "straggler", "telemetry", "topology"]
    assert steps_plugin.pytest_plugins == [f"drills.kinds.{p}.steps" for p in packages]
    # the topology package holds the placement drill and the same promise through a node pull (its restart)
    two = {"topology": ["TopologyDrill", "TopologyRestartDrill"]}
    for package in packages:
        mine = [cls for cls in KINDS.values() if cls.__module__.startswith(f"drills.kinds.{package}.")]
        if package in two:
            assert sorted(cls.__name__ for cls in mine) == two[package], f"drills/kinds/{package} registers {mine}"
        else:
            assert len(mine) == 1, f"drills/kinds/{package} registers {mine}"
        module = importlib.import_module(f"drills.kinds.{package}.steps")
        assert any(s.name in vars(module) for s in SENTENCES), f"drills/kinds/{package}/steps.py has no sentence"
    assert {cls.kind for cls in KINDS.values() if cls.__module__.startswith("drills.kinds.")} == {
        "accelerator-access", "baseline-comparison", "blip", "campaign", "control-plane", "fabric", "gang-submission", "governance", "gpu-fault",
        "hang", "leak-identification", "node-pull", "partition-isolation", "serving", "straggler", "topology", "topology-restart",
        "accelerator-metrics", "remediation"}


def test_a_drill_starts_once_and_names_the_result() -> None:
    ctx = context()
    first = ctx.drill(FirstDrill)
    assert ctx.drill(FirstDrill) is first
    assert ctx.result.drill == "test-first"
    loaded = ctx.drill(LoadedDrill)
    assert ctx.result.drill == "test-loaded"
    assert ctx.drills == [first, loaded]
    assert first.run_id == loaded.run_id == ctx.run_id


def test_an_unregistered_class_is_refused() -> None:
    @dataclasses.dataclass
    class Stray(Drill):
        kind: ClassVar[str] = "stray"

        def rollback(self) -> None:
            pass

    with pytest.raises(TypeError, match="not a registered drill kind"):
        context().drill(Stray)


def test_a_kind_name_is_registered_once() -> None:
    @dataclasses.dataclass
    class Again(Drill):
        kind: ClassVar[str] = "test-first"

        def rollback(self) -> None:
            pass

    with pytest.raises(ValueError, match="registered twice"):
        register(Again)

    class Nameless(Drill):
        def rollback(self) -> None:
            pass

    with pytest.raises(TypeError, match="names no kind"):
        register(Nameless)


def test_rollback_reaches_every_drill_newest_first_then_the_target() -> None:
    ctx = context()
    ctx.drill(FirstDrill)
    ctx.drill(LoadedDrill)
    ctx.rollback()
    assert ROLLED_BACK == ["test-loaded", "test-first"]
    assert ctx.target.restored == 1  # type: ignore[attr-defined]
    assert ctx.target.roles_restored == 1  # type: ignore[attr-defined]
    assert ctx.target.stopped == 1  # type: ignore[attr-defined]


def test_a_shared_sentence_acts_on_the_newest_drill_that_fits() -> None:
    ctx = context()
    with pytest.raises(ValueError, match="no load is running"):
        ctx.running_as(Loaded, "no load is running")
    loaded = ctx.drill(LoadedDrill)
    ctx.drill(FirstDrill)
    assert ctx.running_as(Loaded, "no load is running") is loaded


def test_every_example_is_its_own_sentence_and_no_other() -> None:
    assert len(VOCABULARY) == len(SENTENCES)
    for doc, sentence in zip(VOCABULARY, SENTENCES):
        assert sentence_of(doc.example, doc.keyword) is sentence
        others = [o.name for o in SENTENCES if o is not sentence and o.keyword == sentence.keyword
                  and o.shape.is_matching(doc.example)]
        assert others == [], f"{sentence.name}'s example also reads as {others}"


def _problems(steps: Sequence[str]) -> list[tuple[int, str]]:
    return [(i, exc.problem) for i, exc in check_scenario([Checked(s, {}) for s in steps])]


def test_requirements_are_declared_on_the_sentences_across_kinds() -> None:
    """The serving and control-plane sentences build on each other through marks, not a central table: a load
    needs its service; judging needs the shared 'the load goes on' (which needs either kind's load)."""
    by_name = {s.name: s for s in SENTENCES}
    assert by_name["load_goes_on"].requires == (Requires(("serving_load", "cp_load"), "no load runs in this scenario",
                                                         "put 'Given steady load from ...' or 'Given steady "
                                                         "control-plane load from ...' first"),)
    assert _problems(["inference_service", "steady_load", "load_goes_on", "p99_ttft"]) == []
    assert _problems(["control_plane_load", "load_goes_on", "mutating_p99"]) == []
    assert _problems(["steady_load"]) == [(0, "no inference service to load")]
    assert _problems(["load_goes_on"]) == [(0, "no load runs in this scenario")]
    assert _problems(["control_plane_load", "mutating_p99"]) == [
        (1, "the load is still running here, so there is nothing to judge yet")]
    assert _problems(["control_plane_load", "load_goes_on", "p99_ttft"]) == [
        (2, "no inference service in this scenario")]
    assert _problems(["inference_service", "scale_in_window"]) == [(1, "no autoscaled service to scale in")]
    assert _problems(["autoscaled_service", "scale_in_window"]) == []


TOPOLOGY_NEEDS = {"runs_inside_one": [("topology-gang",)], "waits_whole": [("topology-gang",)],
                  "waits_until_freed": [("topology-gang",), ("topology-other-job-ends",)],
                  "runs_inside_freed": [("topology-freed",)], "runs_again_inside_one": [("topology-bound-job",)]}
WAY_BACK_NEEDS = {"gpu_repaired": [("gpu failed",)], "gpu_repaired_burn_in_fails": [("gpu failed",)],
                  "gpu_fails_again": [("gpu repaired",)], "gpu_returns_after_burn_in": [("gpu repaired",)],
                  "gpu_stays_out": [("gpu repaired",)]}
WAY_BACK_SETS = {"gpu_repaired": ("gpu repaired",), "gpu_repaired_burn_in_fails": ("gpu repaired",),
                 "gpu_fails_again": ("gpu failed",), "fleet_reports_fault": ("faulted",), "fault_clears_halfway": ("faulted",)}
SHARED_HEALTH_NEEDS = {"slices_out_of_service": [("gpu-reset",)]}
SHARED_HEALTH_SETS = {"reset_probe": ("gpu-reset",)}
TOPOLOGY_SETS = {"other_job_every": ("topology-other-job-ends",), "submit_gang": ("topology-gang",),
                 "waits_until_freed": ("topology-freed",), "canary_job_inside_one": ("topology-bound-job",)}


def test_every_ordering_requirement_of_the_serving_and_control_plane_sentences_is_kept() -> None:
    """The marks each sentence needs, as the table that named them before the kinds were split."""
    needs = {s.name: [r.after for r in s.requires] for s in SENTENCES if s.requires}
    assert needs == {
        "scale_in_window": [("autoscaled",)], "low_priority_training": [("service",)],
        "steady_load": [("service",)], "steady_load_with_timeout": [("service",)],
        "drain_replica_node": [("serving_load",)], "pull_replica_node": [("serving_load",)],
        "load_jumps": [("serving_load",)], "burst_ends": [("jumped",)],
        "load_goes_on": [("serving_load", "cp_load")],
        "p99_ttft": [("stopped",), ("service",)], "new_replica_serves": [("autoscaled",), ("jumped",), ("stopped",)],
        "sla_holds_again": [("jumped",), ("stopped",)], "training_resumes": [("training",), ("stopped",)],
        "training_lost": [("training",), ("stopped",)], "sla_back_after_pull": [("pulled",), ("stopped",), ("service",)],
        "error_rate": [("stopped",), ("service",)], "requests_lost": [("stopped",), ("service",)],
        "pods_started": [("cp_load",)], "gpu_pods_started": [("cp_load",)], "pull_any_node": [("cp_load",)],
        "mutating_p99": [("stopped",)], "back_in_service": [("faulted",)],
        "startup_p99": [("startup",), ("stopped",)], "acknowledged_found": [("stopped",)],
        "collective_measured": [("fabric-gang",)], "floor_reached": [("fabric-measured",)],
        "none_behind": [("fabric-measured",)],
        "pod_without_gpu": [("access_node",)], "pod_with_gpus": [("access_node",)],
        "pods_side_by_side": [("access_node",)], "try_each_other": [("access_pods",)],
        "sees_at_most": [("access_pods",)], "opens_at_most": [("access_pods",)], "sees_its_own": [("access_pods",)],
        "no_crossing": [("access_tried",)],
        **TOPOLOGY_NEEDS, **WAY_BACK_NEEDS, **SHARED_HEALTH_NEEDS}
    sets = {s.name: s.sets for s in SENTENCES if s.sets}
    assert sets == {"inference_service": ("service",), "autoscaled_service": ("service", "autoscaled"),
                    "steady_load": ("serving_load",), "steady_load_with_timeout": ("serving_load",),
                    "pull_replica_node": ("pulled", "faulted"), "pull_node": ("faulted",), "gpu_fails": ("faulted", "gpu failed"),
                    "gpu_slows": ("faulted",), "input_slows": ("faulted",), "rank_hangs": ("faulted",),
                    "storage_stalls": ("faulted",), "pull_node_mid_checkpoint": ("faulted",),
                    "control_plane_away": ("faulted",), "nodes_cut_off": ("faulted",), "load_jumps": ("jumped",), "low_priority_training": ("training",),
                    "control_plane_load": ("cp_load",), "pods_started": ("startup",),
                    "gpu_pods_started": ("startup",), "load_goes_on": ("stopped",),
                    "gang_collective": ("fabric-gang",), "collective_measured": ("fabric-measured",),
                    "gpu_node": ("access_node",), "pod_without_gpu": ("access_pods",), "pod_with_gpus": ("access_pods",),
                    "pods_side_by_side": ("access_pods",), "try_each_other": ("access_tried",),
                    **TOPOLOGY_SETS, **WAY_BACK_SETS, **SHARED_HEALTH_SETS}


def test_a_step_name_is_registered_once() -> None:
    from drills.scenario.vocabulary import step

    def enough_capacity(drill: ScenarioContext) -> None:
        """A second sentence with a name already taken."""

    with pytest.raises(ValueError, match="registered twice"):
        step("Given", "some other sentence", "some other sentence")(enough_capacity)


def test_a_placeholder_error_still_names_the_rank() -> None:
    """A rule a kind keeps for itself (node pull's rank) still runs with the others."""
    steps = [Checked("canary_job", {"workers": 2, "gpus": 4, "every": 5}),
             Checked("pull_node", {"rank": 2, "method": None})]
    found = check_scenario(steps)
    assert [(i, e.placeholder) for i, e in found] == [(1, "rank")]
    assert isinstance(found[0][1], PlaceholderError)
