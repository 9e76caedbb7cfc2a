"""The topology drill's judgement (docs/TOPOLOGY.md): inside one domain or spread over several, named; a gang that
should wait places nothing; premises that do not hold are INCONCLUSIVE.  Pure parts as tables, the drill's own
judging fed pod events by hand on a clock the test sets (no cluster, no sleeps)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

from drills.kinds.topology.domains import Freed, Level, Release, domain_room, first_room, parse_level, spread
from drills.kinds.topology.drill import FLAVOR_PROBLEMS, WAITING_HELD, PodTrack, TopologyDrill
from drills.kube.flavors import (REQUIRED_TOPOLOGY_ANNOTATION, FlavorError, GangFlavor, GangSpec, VolcanoForm,
                                 gang_manifests)
from drills.records.verdict import DrillInconclusive, DrillResult, Verdict
from drills.target.profile import reference_profile

RACK = "cloud.provider.com/topology-rack"
DOMAIN_OF = {"n0": "rack-0", "n1": "rack-0", "n2": "rack-1", "n3": "rack-1", "loose": None}


# ------------------------------------------------------------------ pure parts
@pytest.mark.parametrize(("text", "level"), [("rack", Level.RACK), ("racks", Level.RACK), ("Rack", Level.RACK),
                                             ("NVLink domain", Level.NVLINK_DOMAIN), ("nvlink domains",
                                                                                     Level.NVLINK_DOMAIN),
                                             ("zones", Level.ZONE), ("block", Level.BLOCK)])
def test_levels_are_read_singular_or_plural(text: str, level: Level) -> None:
    assert parse_level(text) is level


def test_an_unknown_level_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="rack, block, NVLink domain, zone"):
        parse_level("row")


def test_each_level_has_the_label_clusters_commonly_carry() -> None:
    assert Level.RACK.default_label == RACK
    assert Level.NVLINK_DOMAIN.default_label == "nvidia.com/gpu.clique"
    assert Level.RACK.counted(1) == "1 rack" and Level.NVLINK_DOMAIN.counted(2) == "2 NVLink domains"


def test_a_gang_inside_one_domain() -> None:
    found = spread(Level.RACK, RACK, {"w-0": "n2", "w-1": "n3", "w-2": None}, DOMAIN_OF)
    assert found.inside_one and found.domains == ["rack-1"]


def test_a_gang_across_domains_is_named_pod_by_pod() -> None:
    found = spread(Level.RACK, RACK, {"w-0": "n0", "w-1": "n1", "w-2": "n2", "w-3": "n2"}, DOMAIN_OF)
    assert not found.inside_one and found.domains == ["rack-0", "rack-1"]
    assert found.crossing("g") == (f"gang g spans 2 racks ({RACK}): rack-0 holds w-0 on n0, w-1 on n1; rack-1 holds "
                                   "w-2 on n2, w-3 on n2; it asked to stay inside one rack")


def test_a_node_without_the_label_is_no_domain_and_breaks_the_promise() -> None:
    found = spread(Level.RACK, RACK, {"w-0": "loose", "w-1": "ghost"}, DOMAIN_OF)
    assert not found.inside_one
    assert found.where() == f"nodes without {RACK} hold w-0 on loose, w-1 on ghost"
    assert not spread(Level.RACK, RACK, {"w-0": None}, DOMAIN_OF).inside_one  # nothing placed is not "inside"


def test_room_counts_workers_node_by_node() -> None:
    free = {"n0": 8, "n1": 4, "n2": 7, "n3": 7, "loose": 8}
    assert domain_room(free, DOMAIN_OF, 4) == {"rack-0": 3, "rack-1": 2}  # 7 free GPUs take one worker of 4
    assert domain_room(free, DOMAIN_OF, 8) == {"rack-0": 1, "rack-1": 0}


# Racks of two 8-GPU nodes, another job holding 4 GPUs on each: 4 free per node when the gang is submitted.
HALF_FREE = {"n0": 4, "n1": 4, "n2": 4, "n3": 4}
HOLDERS_END = [Release(105.0, "n1", 4), Release(105.2, "n3", 4), Release(105.4, "n0", 4), Release(105.6, "n2", 4)]


@pytest.mark.parametrize(("workers", "gpus", "freed"), [
    (3, 4, Freed(105.0, "rack-0")),   # smaller than a rack: room once ONE holder of the rack ended (issue 51)
    (2, 6, Freed(105.4, "rack-0")),   # smaller in GPUs, but a 6-GPU worker needs a node its holder left
    (4, 4, Freed(105.4, "rack-0")),   # a whole rack: room once every holder of one rack ended (the shipped 18.3)
    (2, 8, Freed(105.4, "rack-0")),   # a whole rack in 8-GPU workers: the same instant
    (5, 4, None),                     # larger than a rack: never, however many holders end
    (1, 16, None),                    # a worker larger than any node: never
])
def test_a_rack_frees_up_for_a_gang_when_it_has_room_for_the_whole_gang(workers: int, gpus: int,
                                                                         freed: Freed | None) -> None:
    assert first_room(HALF_FREE, DOMAIN_OF, gpus, workers, HOLDERS_END) == freed
    assert first_room(HALF_FREE, DOMAIN_OF, gpus, workers, reversed(HOLDERS_END)) == freed  # order of instants


def test_only_usable_nodes_and_labelled_ones_give_a_rack_room() -> None:
    assert first_room({"n0": 4, "n1": 4}, DOMAIN_OF, 4, 3, [Release(101.0, "n2", 8), Release(102.0, "gone", 8)]) \
        is None  # n2 was cordoned when the gang was submitted; "gone" is no node the harness read
    assert first_room({"loose": 0, "n0": 4, "n1": 4}, DOMAIN_OF, 4, 3, [Release(101.0, "loose", 8)]) is None
    assert first_room({"n0": 4, "n1": 4}, DOMAIN_OF, 4, 3, []) is None


# ------------------------------------------------------------------ how a gang asks, per flavor
def gang_spec(**kw: Any) -> GangSpec:
    return GangSpec(name="g", run_id="r", workers=2, gpus_per_worker=4, image="i", required_topology=RACK, **kw)


def test_every_pod_carries_kueue_s_annotation_in_the_plain_forms() -> None:
    for flavor in (GangFlavor.KUEUE, GangFlavor.VOLCANO, GangFlavor.KAI):
        pods = [m for m in gang_manifests(gang_spec(), flavor, VolcanoForm.PODGROUP) if m["kind"] == "Pod"]
        assert [p["metadata"]["annotations"][REQUIRED_TOPOLOGY_ANNOTATION] for p in pods] == [RACK, RACK], flavor
    job = gang_manifests(gang_spec(), GangFlavor.VOLCANO)[0]
    assert job["spec"]["tasks"][0]["template"]["metadata"]["annotations"] == {REQUIRED_TOPOLOGY_ANNOTATION: RACK}


def test_the_native_pod_group_and_its_template_carry_the_topology_constraint() -> None:
    workload, group, *_ = gang_manifests(gang_spec(), GangFlavor.NATIVE)
    constraint = {"topology": [{"key": RACK}]}
    assert group["spec"]["schedulingConstraints"] == constraint
    assert workload["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == constraint
    plain = replace(gang_spec(), required_topology=None)
    assert all("schedulingConstraints" not in m.get("spec", {}) for m in gang_manifests(plain, GangFlavor.NATIVE))
    assert all(REQUIRED_TOPOLOGY_ANNOTATION not in m["metadata"].get("annotations", {})
               for m in gang_manifests(plain, GangFlavor.KUEUE))


def test_a_topology_that_is_no_label_key_is_refused() -> None:
    with pytest.raises(FlavorError, match="not a node label key"):
        GangSpec(name="g", run_id="r", workers=2, gpus_per_worker=4, image="i", required_topology="a rack")


# ------------------------------------------------------------------ where it can run
def test_the_reference_platform_reads_the_annotation_in_every_flavor_real_clusters_only_kueue_and_native() -> None:
    profile = reference_profile()
    for flavor in GangFlavor:
        assert TopologyDrill.unsupported(replace(profile, flavor=flavor), reference=True) is None
    assert TopologyDrill.unsupported(replace(profile, flavor=GangFlavor.KUEUE), reference=False) is None
    assert TopologyDrill.unsupported(replace(profile, flavor=GangFlavor.NATIVE), reference=False) is None
    assert "HyperNode" in (TopologyDrill.unsupported(profile, reference=False) or "")
    assert "Topology object" in (TopologyDrill.unsupported(replace(profile, flavor=GangFlavor.KAI), reference=False)
                                 or "")
    assert set(FLAVOR_PROBLEMS) == {GangFlavor.VOLCANO, GangFlavor.KAI}
    no_storage = replace(profile, canary=replace(profile.canary, shared_volume=None))
    assert "shared_volume" in (TopologyDrill.unsupported(no_storage, reference=True) or "")


def test_the_kueue_flavor_asks_to_read_kueue_s_topology_objects() -> None:
    perms = TopologyDrill.permissions(replace(reference_profile(), flavor=GangFlavor.KUEUE))
    assert {(p.group, p.resource, p.verb) for p in perms} >= {
        ("kueue.x-k8s.io", "topologies", "get"), ("kueue.x-k8s.io", "resourceflavors", "get"),
        ("kueue.x-k8s.io", "localqueues", "get"), ("kueue.x-k8s.io", "workloads", "delete"), ("", "nodes", "list")}


# ------------------------------------------------------------------ the drill's judging
@dataclass
class Clock:
    now: float = 100.0
    step: float = 0.0
    """Seconds each reading advances the clock (a wait with a deadline then ends, without sleeping long)."""

    def mono(self) -> float:
        self.now += self.step
        return self.now


@dataclass
class FakeTarget:
    clock: Clock = field(default_factory=Clock)

    @property
    def driver(self) -> Any:
        return SimpleNamespace(timeline=SimpleNamespace(clock=self.clock))


def drill(workers: int, gpus: int, room: dict[str, int], cluster_room: int,
          free: dict[str, int] | None = None) -> tuple[TopologyDrill, Clock]:
    """A drill that submitted a gang at 100.0; ``free``: the free GPUs per node it read then."""
    target = FakeTarget()
    made = TopologyDrill(target=target, result=DrillResult("topology"), run_id="r")  # type: ignore[arg-type]
    made.use(Level.RACK)
    made.domain_of = dict(DOMAIN_OF)
    made.spec = GangSpec(name="g", run_id="r", workers=workers, gpus_per_worker=gpus, image="i",
                         required_topology=RACK)
    made.gang = {f"g-worker-{i}": PodTrack(gpus) for i in range(workers)}
    made.room, made.cluster_room, made.submitted_at = room, cluster_room, 100.0
    made.free_at_submit = dict(free if free is not None else HALF_FREE)
    return made, target.clock


def pod(name: str, node: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_a_gang_that_runs_inside_one_rack_passes_with_its_time() -> None:
    made, clock = drill(2, 4, {"rack-0": 2, "rack-1": 4}, 6)
    clock.now = 100.4
    for i, node in enumerate(("n2", "n3")):
        made._on_pod("MODIFIED", pod(f"g-worker-{i}", node, "Running"))
    m = made.wait_inside_one(0.0)
    assert m.value == pytest.approx(0.4) and made.result.verdict is Verdict.PASS and not made.result.findings
    assert made.result.details["placement"]["g-worker-1"] == {"node": "n3", "domain": "rack-1", "bound_s": 0.4,
                                                              "ended_s": None, "phase": "Running"}


def test_a_gang_across_racks_fails_naming_them_before_it_runs() -> None:
    made, clock = drill(2, 4, {"rack-0": 2, "rack-1": 4}, 6)
    made._on_pod("MODIFIED", pod("g-worker-0", "n1"))
    made._on_pod("MODIFIED", pod("g-worker-1", "n2"))
    m = made.wait_inside_one(0.0)
    assert m.value is None and made.result.verdict is Verdict.FAIL
    assert made.result.findings == [f"gang g spans 2 racks ({RACK}): rack-0 holds g-worker-0 on n1; rack-1 holds "
                                    "g-worker-1 on n2; it asked to stay inside one rack"]


def test_a_gang_no_rack_had_room_for_is_not_judged_on_fitting_one() -> None:
    made, _ = drill(4, 4, {"rack-0": 2, "rack-1": 2}, 4)
    with pytest.raises(DrillInconclusive, match="no rack had room for the gang's 4 workers of 4 GPUs"):
        made.wait_inside_one(0.0)


def test_a_gang_that_waits_whole_holds_nothing() -> None:
    made, clock = drill(3, 8, {"rack-0": 2, "rack-1": 2}, 4)
    clock.now = 103.5  # the window (3 s after submission) is over and nothing was bound
    m = made.observe_waiting(3.0, 3.0)
    assert (m.name, m.value) == (WAITING_HELD, 0.0) and made.result.verdict is Verdict.PASS


def test_a_gang_that_should_wait_but_is_placed_fails_naming_domains_pods_and_gpus() -> None:
    made, clock = drill(3, 8, {"rack-0": 2, "rack-1": 2}, 4)
    clock.now = 100.2
    for i, node in enumerate(("n3", "n1", "n2")):
        made._on_pod("MODIFIED", pod(f"g-worker-{i}", node))
    m = made.observe_waiting(3.0, 3.0)
    assert m.value == 24.0 and made.result.verdict is Verdict.FAIL
    assert made.result.findings == [
        "gang g was to wait whole (no rack had room for its 3 workers of 8 GPUs; workers each rack had room for: "
        f"rack-0 2, rack-1 2) but 3 of its 3 pods were placed, holding 24 GPUs in 2 racks ({RACK}): rack-0 holds "
        "g-worker-1 on n1; rack-1 holds g-worker-0 on n3, g-worker-2 on n2; bound after submission: g-worker-0 at "
        "0.20 s, g-worker-1 at 0.20 s, g-worker-2 at 0.20 s, within the 3 s it was to wait"]


@pytest.mark.parametrize(("room", "cluster", "why"), [
    ({"rack-0": 3, "rack-1": 2}, 5, "rack rack-0 had room for the gang's 3 workers"),
    ({"rack-0": 1, "rack-1": 1}, 2, "the cluster had room for 2 of the gang's 3 workers"),
])
def test_waiting_proves_nothing_where_a_rack_has_room_or_the_cluster_has_none(room: dict[str, int], cluster: int,
                                                                               why: str) -> None:
    made, _ = drill(3, 8, room, cluster)
    with pytest.raises(DrillInconclusive, match=why):
        made.observe_waiting(3.0, 3.0)


def _other_job(made: TopologyDrill, ended: dict[str, tuple[str, float | None]],
               held_at_submit: set[str] | None = None) -> None:
    """The other job's pods (4 GPUs each): their node and when the watch saw them end (None: still holding)."""
    made.others = {name: PodTrack(4, node=node, phase="Succeeded" if at is not None else "Running", ended_at=at)
                   for name, (node, at) in ended.items()}
    made.held_at_submit = frozenset(made.others if held_at_submit is None else held_at_submit)


def test_a_rack_frees_up_for_a_whole_rack_gang_when_every_pod_the_other_job_had_in_it_has_ended() -> None:
    made, _ = drill(4, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(made, {"o0": ("n0", 104.0), "o1": ("n1", None), "o2": ("n2", 104.3), "o3": ("n3", 104.1)})
    assert made.freed() == Freed(104.3, "rack-1")  # rack-1's last pod; rack-0 still has one running
    _other_job(made, {"o0": ("n0", 104.0), "o1": ("n1", None)})
    assert made.freed_at() is None


def test_a_rack_frees_up_for_a_smaller_gang_when_its_first_holder_ends() -> None:
    made, _ = drill(3, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(made, {"o0": ("n0", 104.0), "o1": ("n1", None), "o2": ("n2", 104.3), "o3": ("n3", 104.1)})
    assert made.freed() == Freed(104.0, "rack-0")
    _other_job(made, {"o0": ("n0", 99.0), "o1": ("n1", None)}, held_at_submit={"o1"})
    assert made.freed_at() is None  # o0 ended before the submission: its GPUs were free in the reading already


def test_a_smaller_gang_placed_once_one_holder_of_a_rack_ended_waited_and_passes() -> None:
    """Issue 51: three 4-GPU workers, racks of two 8-GPU nodes each lending 4 GPUs: the honest scheduler places the
    gang as soon as ONE holder of rack-0 ends; that is waiting, and the time to run whole counts from then."""
    made, clock = drill(3, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(made, {"o0": ("n0", 105.3), "o1": ("n1", 105.0), "o2": ("n2", 105.2), "o3": ("n3", 105.4)})
    clock.now = 105.1
    for i, node in enumerate(("n1", "n0", "n1")):
        made._on_pod("MODIFIED", pod(f"g-worker-{i}", node, "Running"))
    assert made.observe_waiting(None, 0.0).value == 0.0 and made.result.verdict is Verdict.PASS
    assert made.result.details["room_for_the_gang"] == {"domain": "rack-0", "at_s": 5.0}
    assert made.wait_inside_one(0.0, since_freed=True).value == pytest.approx(0.1)
    assert made.result.verdict is Verdict.PASS and not made.result.findings


def test_a_smaller_gang_partly_bound_before_any_rack_had_room_fails_with_the_bind_instants() -> None:
    made, clock = drill(3, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(made, {"o0": ("n0", 105.3), "o1": ("n1", 105.0), "o2": ("n2", None), "o3": ("n3", None)})
    for i, (at, node) in enumerate(((100.03, "n1"), (100.04, "n0"))):
        clock.now = at
        made._on_pod("MODIFIED", pod(f"g-worker-{i}", node, "Running"))
    clock.now, clock.step = 106.0, 0.5  # worker-2 is never bound: the drill gives the rest of the gang its moment
    assert made.observe_waiting(None, 0.0).value == 8.0 and made.result.verdict is Verdict.FAIL
    assert made.result.findings == [
        "gang g was to wait whole (no rack had room for its 3 workers of 4 GPUs; workers each rack had room for: "
        f"rack-0 2, rack-1 2) but 2 of its 3 pods were placed, holding 8 GPUs in 1 rack ({RACK}): rack-0 holds "
        "g-worker-0 on n1, g-worker-1 on n0; bound after submission: g-worker-0 at 0.03 s, g-worker-1 at 0.04 s, "
        "before any rack had room for the whole gang (rack-0 had from 5.00 s)"]


def test_a_gang_larger_than_any_rack_never_sees_one_free_up() -> None:
    made, _ = drill(5, 4, {"rack-0": 2, "rack-1": 2}, 6)  # the cluster has room (its nodes without a rack)
    _other_job(made, {"o0": ("n0", 104.0), "o1": ("n1", 104.2), "o2": ("n2", 104.3), "o3": ("n3", 104.1)})
    assert made.freed() is None
    with pytest.raises(DrillInconclusive, match="no rack gained room for the gang's 5 workers of 4 GPUs within 0 s "
                                                "as the other job's pods ended .o0 on n0 ended at 4.00 s"):
        made.observe_waiting(None, 0.0)


def test_a_gang_placed_once_a_rack_freed_up_waited_and_one_placed_before_did_not() -> None:
    made, clock = drill(4, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(made, {"o0": ("n0", 104.0), "o1": ("n1", 104.2)})
    clock.now = 104.5
    for i, node in enumerate(("n0", "n0", "n1", "n1")):
        made._on_pod("MODIFIED", pod(f"g-worker-{i}", node, "Running"))
    assert made.observe_waiting(None, 0.0).value == 0.0
    assert made.wait_inside_one(0.0, since_freed=True).value == pytest.approx(0.3)
    assert made.result.verdict is Verdict.PASS

    early, clock = drill(4, 4, {"rack-0": 2, "rack-1": 2}, 4)
    _other_job(early, {"o0": ("n0", 104.0), "o1": ("n1", 104.2)})
    clock.now = 101.0
    early._on_pod("MODIFIED", pod("g-worker-0", "n2"))
    clock.now = 104.5
    for i, node in enumerate(("n0", "n1", "n1"), start=1):
        early._on_pod("MODIFIED", pod(f"g-worker-{i}", node))
    assert early.observe_waiting(None, 0.0).value == 4.0
    assert "1 of its 4 pods was placed, holding 4 GPUs in 1 rack" in early.result.findings[0]
