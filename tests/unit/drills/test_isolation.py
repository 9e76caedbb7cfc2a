"""The pure parts of the partition isolation drill: layout discovery, partition configs, the promise table,
judging a probe (including a node that claims MIG but behaves like time-slicing)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from drills.errors import PlaceholderError
from drills.kinds.isolation.drill import (
    EVERY_ON_GPU,
    NO_TENANT,
    ONLY_IT,
    LayoutError,
    admission_refused,
    describe_affected,
    discover_layout,
    judge_probe,
    layout_mismatch,
    parse_scope,
    partition_config,
    partitioned,
    pod_reason,
    promise,
)


def node(labels: dict[str, str], allocatable: dict[str, str], name: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": allocatable}}


H200 = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "143771"}


def test_mig_single_layout_from_labels_and_allocatable() -> None:
    layout = discover_layout(node({**H200, "firedrill.dev/partition-mode": "mig-single",
                                   "nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "all-1g.18gb",
                                   "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb"},
                                  {"nvidia.com/gpu": "7", "cpu": "64"}))
    assert layout.mode == "mig-single" and layout.total_slices == 7 and layout.enforced
    (kind,) = layout.slices
    assert (kind.resource, kind.count, kind.profile, kind.memory_mib) == ("nvidia.com/gpu", 7, "1g.18gb", 18432)


def test_mig_mixed_layout_reads_each_profile_and_its_memory_label() -> None:
    labels = {**H200, "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.18gb.memory": "16384",
              "nvidia.com/mig-3g.71gb.count": "1"}
    layout = discover_layout(node(labels, {"nvidia.com/mig-3g.71gb": "1", "nvidia.com/mig-2g.35gb": "1",
                                           "nvidia.com/mig-1g.18gb": "2"}))
    assert layout.mode == "mig-mixed"  # from NVIDIA's strategy label alone
    kinds = {k.profile: (k.count, k.memory_mib) for k in layout.slices}
    assert kinds == {"1g.18gb": (2, 16384), "2g.35gb": (1, 35 * 1024), "3g.71gb": (1, 71 * 1024)}
    assert layout.total_slices == 4


def test_time_slicing_and_hami_shares() -> None:
    ts = discover_layout(node({**H200, "nvidia.com/gpu.sharing-strategy": "time-slicing",
                               "nvidia.com/gpu.replicas": "4"}, {"nvidia.com/gpu": "4"}))
    assert ts.mode == "time-slicing" and ts.slices[0].memory_mib == 143771 // 4
    renamed = discover_layout(node({**H200, "nvidia.com/gpu.replicas": "4"}, {"nvidia.com/gpu.shared": "4"}))
    assert renamed.mode == "time-slicing" and renamed.slices[0].resource == "nvidia.com/gpu.shared"
    hami = discover_layout(node({**H200, "firedrill.dev/partition-mode": "hami"},
                                {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "143771"}))
    assert hami.mode == "hami" and hami.extra_requests == (("nvidia.com/gpumem", 143771 // 4),)


def test_a_node_claiming_isolation_it_does_not_enforce_is_read_as_such() -> None:
    layout = discover_layout(node({**H200, "firedrill.dev/partition-mode": "mig-single",
                                   "firedrill.dev/isolation-enforced": "false",
                                   "nvidia.com/mig.config": "all-1g.18gb"}, {"nvidia.com/gpu": "7"}))
    assert layout.mode == "mig-single" and not layout.enforced


def test_layouts_that_cannot_be_read_say_what_is_missing() -> None:
    with pytest.raises(LayoutError, match="advertises no nvidia.com/mig-<profile>"):
        discover_layout(node({**H200, "nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/gpu": "1"}))
    with pytest.raises(LayoutError, match="not one of"):
        discover_layout(node({"firedrill.dev/partition-mode": "vgpu"}, {}))
    assert not partitioned(node(H200, {"nvidia.com/gpu": "8"}))
    assert partitioned(node({"nvidia.com/mig.strategy": "single"}, {}))


def test_partition_configs_from_the_feature_words() -> None:
    assert partition_config("MIG 7 x 1g.18gb", "H200") == {"mode": "mig-single", "layout": [["1g.18gb"] * 7]}
    assert partition_config("MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb", "H200") == {
        "mode": "mig-mixed", "layout": [["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]]}
    assert partition_config("time-slicing x 4", "H100-80GB") == {"mode": "time-slicing", "replicas": 4}
    assert partition_config("HAMi x 4 (isolation not enforced)", "H200") == {
        "mode": "hami", "vgpus_per_gpu": 4, "enforce_isolation": False}


@pytest.mark.parametrize("words, model, message", [
    ("MIG 8 x 1g.18gb", "H200", "at most 7"),
    ("MIG 1g.10gb", "H200", "does not exist on H200"),
    ("MIG 3g.71gb + 3g.71gb + 2g.35gb", "H200", "does not fit"),
    ("MIG 7 x 1g.18gb", "L4", "unknown GPU model"),
    ("time-slicing x 4", "B200", "unknown GPU model"),
    ("MIG 7 x 1g.10gb", "A100", r"7 x 1g.10gb on one A100-40GB GPU \(A100 means A100-40GB\): it holds at most 4"),
    ("time-slicing x 1", "H200", "write 2 to 64"),
    ("spatial x 4", "H200", "unknown partition"),
])
def test_bad_partition_words_are_refused_clearly(words: str, model: str, message: str) -> None:
    with pytest.raises(PlaceholderError, match=message) as exc:
        partition_config(words, model)
    assert exc.value.value in (words, model) and exc.value.fix.startswith("write ")


def test_a_layout_the_model_cannot_hold_names_its_layouts_and_the_models_that_hold_it() -> None:
    with pytest.raises(PlaceholderError) as exc:
        partition_config("MIG 7 x 1g.10gb", "A100")
    assert exc.value.placeholder == "layout"
    assert "MIG 7 x 1g.5gb, MIG 4 x 1g.10gb" in exc.value.fix  # what an A100-40GB holds
    assert exc.value.fix.endswith("a model that holds it: A100-80GB, H100-80GB")


def test_the_promise_table() -> None:
    assert [promise("mig-mixed", p) for p in ("memory", "contained", "reset")] == [ONLY_IT, ONLY_IT, EVERY_ON_GPU]
    assert [promise("time-slicing", p) for p in ("memory", "contained", "reset")] == [EVERY_ON_GPU] * 3
    assert [promise("hami", p) for p in ("memory", "contained", "reset")] == [ONLY_IT, EVERY_ON_GPU, EVERY_ON_GPU]
    assert parse_scope("Every tenant on that GPU") == EVERY_ON_GPU and parse_scope("only that tenant") == ONLY_IT
    with pytest.raises(ValueError, match="unknown outcome"):
        parse_scope("some tenants")


TENANTS = [f"tenant-{i}" for i in range(1, 8)]
ONE_GPU = {t: 0 for t in TENANTS}


def test_mig_contained_fault_that_stays_in_its_slice_passes() -> None:
    j = judge_probe("contained", ONLY_IT, "tenant-1", TENANTS, ONE_GPU, {"tenant-1": "GPUXid94"})
    assert j.ok and j.findings("mig-single", "tenant-1") == []


def test_a_node_that_claims_mig_but_behaves_like_time_slicing_fails_naming_the_tenants() -> None:
    failed = {t: "GPUXid94: Xid 94 on GPU 0" for t in TENANTS}
    j = judge_probe("contained", promise("mig-single", "contained"), "tenant-1", TENANTS, ONE_GPU, failed)
    assert not j.ok and j.escaped == TENANTS[1:] and not j.spared
    (finding,) = j.findings("mig-single", "tenant-1")
    assert finding.startswith("ISOLATION ESCAPED")
    assert "tenant-2 (GPUXid94" in finding and "tenant-7" in finding and "should have survived" in finding
    assert describe_affected(set(failed), "tenant-1", ONE_GPU) == EVERY_ON_GPU


def test_a_reset_fault_that_spares_tenants_on_the_gpu_fails_naming_them() -> None:
    gpus = {"a": 0, "b": 0, "c": 1}
    j = judge_probe("reset", EVERY_ON_GPU, "a", ["a", "b", "c"], gpus, {"a": "GPUXid79"})
    assert j.spared == ["b"] and not j.escaped  # c is on another GPU: it must survive, and did
    assert "tenant b should have failed" in j.findings("time-slicing", "a")[0]
    escaped = judge_probe("reset", EVERY_ON_GPU, "a", ["a", "b", "c"], gpus, {"a": "x", "b": "x", "c": "x"})
    assert escaped.escaped == ["c"]


def test_describe_affected_in_customer_words() -> None:
    assert describe_affected(set(), "a", {"a": 0}) == NO_TENANT
    assert describe_affected({"a"}, "a", {"a": 0, "b": 0}) == ONLY_IT
    assert describe_affected({"a", "c"}, "a", {"a": 0, "b": 0, "c": 1}) == "tenants a, c"


def _drill_after_probe(mode: str, failed: set[str], embedded: bool = True) -> Any:
    from types import SimpleNamespace

    from drills.kinds.isolation.drill import IsolationDrill, Layout, SliceKind
    from drills.records.verdict import DrillResult

    target = SimpleNamespace(embedded=object() if embedded else None)
    drill = IsolationDrill(target, DrillResult("partition-isolation"), "fdtest")  # type: ignore[arg-type]
    drill.layout = Layout("n1", mode, 1, "NVIDIA-H200", (SliceKind("nvidia.com/gpu", 3, 18432, "1g.18gb"),))
    drill.node = "n1"
    column = {"probe": "contained", "title": "contained fault (Xid 94) on its slice", "victim": "tenant-1",
              "gpu": 0, "status": "done", "note": "", "promised": promise(mode, "contained"),
              "gpus": {f"tenant-{i}": 0 for i in (1, 2, 3)},
              "outcomes": {f"tenant-{i}": ({"state": "failed", "reason": "GPUXid94"} if f"tenant-{i}" in failed
                                           else {"state": "survived", "reason": ""}) for i in (1, 2, 3)}}
    drill.probes.append(column)
    drill.last_probe = column
    return drill


def test_judging_the_last_probe_marks_the_matrix_and_the_verdict() -> None:
    drill = _drill_after_probe("mig-single", {"tenant-1", "tenant-3"})
    drill.judge_last(ONLY_IT)
    assert drill.result.verdict.value == "FAIL"
    assert "tenant tenant-3 (GPUXid94)" in drill.result.findings[0]
    cells = drill.result.details["isolation_matrix"]["probes"][0]["outcomes"]
    assert cells["tenant-3"]["escaped"] and not cells["tenant-2"]["escaped"] and cells["tenant-2"]["state"] == "survived"


def test_words_that_contradict_the_contract_are_an_error_naming_both() -> None:
    drill = _drill_after_probe("time-slicing", {"tenant-1"})
    with pytest.raises(ValueError, match="promises 'every tenant on that GPU' for mode time-slicing"):
        drill.judge_last(ONLY_IT)


def test_a_fault_that_left_no_trace_is_inconclusive() -> None:
    drill = _drill_after_probe("mig-single", set())
    drill.judge_last(ONLY_IT)
    assert drill.result.verdict.value == "INCONCLUSIVE"
    assert drill.result.details["isolation_matrix"]["probes"][0]["status"] == "inconclusive"


@pytest.mark.parametrize("status,refused,reason", [
    ({"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": "Allocate failed"}, True,
     "UnexpectedAdmissionError"),
    ({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"reason": "UnexpectedAdmissionError"}}}]},
     True, "UnexpectedAdmissionError"),
    ({"phase": "Failed", "reason": "OutOfMemory",
      "containerStatuses": [{"state": {"terminated": {"reason": "Error"}}}]}, False, "OutOfMemory"),
    ({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"reason": "GPUXid79"}}}]}, False, "GPUXid79"),
    ({"phase": "Running"}, False, ""),
    ({"phase": "Pending", "reason": "UnexpectedAdmissionError"}, False, "UnexpectedAdmissionError"),
])
def test_a_pod_refused_at_admission_is_no_probe_outcome(status: dict[str, Any], refused: bool, reason: str) -> None:
    pod = {"metadata": {"name": "tenant-1"}, "status": status}
    assert admission_refused(pod) is refused
    assert pod_reason(pod) == reason


MIG7 = node({**H200, "nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "all-1g.18gb",
             "nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb"}, {"nvidia.com/gpu": "7"}, name="mig7")
MIXED = node({**H200, "nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/mig-3g.71gb": "1",
             "nvidia.com/mig-2g.35gb": "1", "nvidia.com/mig-1g.18gb": "2"}, name="mixed")
SLICED = node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1",
               "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
              {"nvidia.com/gpu": "4"}, name="sliced")


@pytest.mark.parametrize("layout_node, gpus, model, words, why", [
    (MIG7, 1, "H200", "MIG 7 x 1g.18gb", ""),
    (MIXED, 1, "H200", "MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb", ""),
    (SLICED, 1, "H100-80GB", "time-slicing x 4", ""),
    (MIG7, 1, "H200", "MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb", "mode mig-single, not mig-mixed"),
    (MIXED, 1, "H200", "MIG 3g.71gb + 2g.35gb + 2g.35gb", "MIG instances 2 x 1g.18gb, 1 x 2g.35gb, 1 x 3g.71gb, "
                                                         "not 2 x 2g.35gb, 1 x 3g.71gb"),
    (SLICED, 1, "H200", "time-slicing x 4", "GPU NVIDIA-H100-80GB-HBM3, not H200"),
    (SLICED, 1, "H100-80GB", "time-slicing x 2", "4 tenant slices, not 2 (2 per GPU)"),
    (MIG7, 2, "H200", "MIG 7 x 1g.18gb", "1 GPUs, not 2"),
])
def test_a_node_is_the_one_a_feature_describes_only_when_its_layout_is(layout_node: dict[str, Any], gpus: int,
                                                                       model: str, words: str, why: str) -> None:
    assert layout_mismatch(discover_layout(layout_node), gpus, model, partition_config(words, model)) == why


# --------------------------------------------------- a faulted GPU's slices leave allocatable (issue 49)

def test_which_slices_are_one_gpus_is_read_from_the_allocatable_or_said_to_be_unknown() -> None:
    from drills.kinds.isolation.drill import Layout, SliceKind, slices_per_gpu

    kinds = (SliceKind("nvidia.com/mig-1g.18gb", 4, 18432, "1g.18gb"), SliceKind("nvidia.com/mig-3g.71gb", 2, 72704,
                                                                                  "3g.71gb"))
    assert slices_per_gpu(Layout("n1", "mig-mixed", 2, "H200", kinds)) == (
        {"nvidia.com/mig-1g.18gb": 2, "nvidia.com/mig-3g.71gb": 1}, "")
    per_gpu, why = slices_per_gpu(Layout("n1", "mig-mixed", 2, "H200", (*kinds, SliceKind("nvidia.com/mig-2g.35gb",
                                                                                          1, 35840, "2g.35gb"))))
    assert per_gpu == {} and "1 x nvidia.com/mig-2g.35gb over 2 GPUs" in why and "node n1" in why


def test_the_slices_of_a_gpu_left_allocatable_are_counted_against_the_node_before_the_fault() -> None:
    from drills.kinds.isolation.drill import slices_left

    per_gpu = {"nvidia.com/gpu": 4}
    assert slices_left(per_gpu, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}) == {"nvidia.com/gpu": 4}
    assert slices_left(per_gpu, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 5}) == {"nvidia.com/gpu": 1}
    assert slices_left(per_gpu, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 3}) == {"nvidia.com/gpu": 0}


def test_judging_when_every_slice_left_and_whether_one_came_back_while_the_fault_stood() -> None:
    from drills.kinds.isolation.drill import judge_slices_out

    per_gpu = {"r": 7}
    seen = [(0.0, {"r": 7}), (10.4, {"r": 1}), (10.9, {"r": 0}), (20.0, {"r": 7})]
    got = judge_slices_out(seen, 10.0, 3.0, per_gpu)
    assert got.out_after == pytest.approx(0.9) and got.back_after == pytest.approx(10.0) and got.back == {"r": 7}
    assert judge_slices_out(seen, 10.0, 3.0, per_gpu, until=15.0).back_after is None  # repaired before: no finding
    late = judge_slices_out(seen, 10.0, 0.5, per_gpu)  # out at 0.9 s: not within 0.5 s
    assert late.out_after is None and late.left == {"r": 1}
    assert judge_slices_out([(0.0, {"r": 7})], 10.0, 3.0, per_gpu).left == {"r": 7}  # nothing moved


def _drill_after_reset(mode: str, seen: list[tuple[float, dict[str, int]]], failed: set[str], *,
                       embedded: bool = True, repaired: float | None = None, slices: int = 3,
                       gpus: int = 1) -> Any:
    from types import SimpleNamespace

    from drills.kinds.isolation.drill import IsolationDrill, Layout, SliceKind
    from drills.records.verdict import DrillResult

    clock = SimpleNamespace(mono=lambda: 100.0)  # the window is long over
    target = SimpleNamespace(embedded=object() if embedded else None, timeline=SimpleNamespace(clock=clock))
    drill = IsolationDrill(target, DrillResult("partition-isolation"), "fdtest")  # type: ignore[arg-type]
    profile = "1g.18gb" if mode.startswith("mig") else ""
    drill.layout = Layout("n1", mode, gpus, "NVIDIA-H200", (SliceKind("nvidia.com/gpu", slices, 18432, profile),))
    drill.node = "n1"
    column = {"probe": "reset", "gpus": {f"tenant-{i}": 0 for i in (1, 2, 3)},
              "outcomes": {f"tenant-{i}": ({"state": "failed", "reason": "GPUXid79"} if f"tenant-{i}" in failed
                                           else {"state": "survived", "reason": ""}) for i in (1, 2, 3)}}
    drill.node_seen = list(seen)
    drill.reset_fault = {"column": column, "gpu": 0, "xid": 79, "at": 10.0, "repaired": repaired}
    return drill


def test_every_slice_out_in_time_passes_and_measures_when() -> None:
    drill = _drill_after_reset("mig-single", [(9.0, {"nvidia.com/gpu": 3}), (10.5, {"nvidia.com/gpu": 0})],
                               {"tenant-1", "tenant-2", "tenant-3"})
    got = drill.judge_slices(3.0)
    assert got.out_after == pytest.approx(0.5) and drill.result.verdict.value == "PASS"
    assert drill.result.details["slices_out"]["left"] == {"nvidia.com/gpu": 0}


def test_slices_still_allocatable_fail_naming_the_node_the_gpu_the_slices_and_the_tenants_on_them() -> None:
    drill = _drill_after_reset("mig-single", [(9.0, {"nvidia.com/gpu": 3}), (10.5, {"nvidia.com/gpu": 2})],
                               {"tenant-1"})
    drill.judge_slices(3.0)
    assert drill.result.verdict.value == "FAIL"
    assert drill.result.findings == [
        "GPU 0 of node n1 took a reset-class fault (Xid 79), yet 2 of its 3 slices were still allocatable 3 s "
        "later: 2 MIG 1g.18gb instances (nvidia.com/gpu); tenants still running on it: tenant-2, tenant-3"]


def test_a_slice_back_while_the_fault_stands_fails() -> None:
    drill = _drill_after_reset("time-slicing", [(9.0, {"nvidia.com/gpu": 3}), (10.5, {"nvidia.com/gpu": 0}),
                                                (12.0, {"nvidia.com/gpu": 1})], {"tenant-1", "tenant-2", "tenant-3"})
    drill.judge_slices(3.0)
    assert drill.result.findings == ["GPU 0 of node n1: 1 time-slicing replica (nvidia.com/gpu) allocatable again "
                                     "2.0 s after its reset-class fault (Xid 79), while the fault still stood"]


@pytest.mark.parametrize(("kwargs", "failed", "says"), [
    ({"slices": 3, "gpus": 2}, {"tenant-1"}, "3 x nvidia.com/gpu over 2 GPUs"),
    ({"embedded": False}, set(), "no tenant failed either, so the injection is not confirmed"),
    ({"embedded": False, "repaired": 11.5}, {"tenant-1"}, "was repaired 1.5 s after it, before the 3 s window ended"),
])
def test_what_cannot_be_told_is_inconclusive_naming_it(kwargs: dict[str, Any], failed: set[str], says: str) -> None:
    from drills.records.verdict import DrillInconclusive

    drill = _drill_after_reset("time-slicing", [(9.0, {"nvidia.com/gpu": 3})], failed, **kwargs)
    with pytest.raises(DrillInconclusive, match=re.escape(says)):
        drill.judge_slices(3.0)
