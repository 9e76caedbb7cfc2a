"""The accelerator access drill's truth and judgement: the probe program, run here as a pod runs it
(``python3 -c <source>``), and the pure judgements over its reports (docs/ACCESS.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drills.kinds.access.drill import whole_gpu_node
from drills.kinds.access.judge import ProbePod, crossings, exactly_own, opened_beyond, seen_beyond
from drills.kinds.access.steps import _enough_free, gpu_node, pod_with_gpus, pods_side_by_side, try_each_other
from drills.scenario.invariants import identity_from_lines
from drills.scenario.vocabulary import Checked
from drills.workloads.accessprobe import (
    AccessReport, Attempt, Outcome, access_args, access_pod, parse_access_line, parse_access_lines, program_source,
)
from tests.unit.drills import fakegpu

A, B = "GPU-aaaaaaaa-0000-0000-0000-000000000001", "GPU-bbbbbbbb-0000-0000-0000-000000000002"


# ----------------------------------------------------------------------------- the program, as a pod runs it


def probe_lines(env: dict[str, str], *args: str, reports: int = 1) -> list[str]:
    """The probe's first lines: its start line and ``reports`` access lines (it then holds until killed)."""
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-I", "-c", program_source(), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            while sum(1 for ln in lines if '"event": "access"' in ln) < reports:
                line = proc.stdout.readline()
                if not line:
                    raise AssertionError(f"the probe ended early ({proc.wait()}): {proc.stderr.read()}")
                lines.append(line.rstrip("\n"))
        finally:
            proc.kill()
    return lines


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAKE_", "NVIDIA_", "FIREDRILL_")) and k != "LD_LIBRARY_PATH"}
    env.update(extra)
    return env


def device_dir(tmp_path: Path, nodes: dict[str, str]) -> Path:
    """A device directory as the reference agent writes one: a file per GPU, holding its identity."""
    d = tmp_path / "dev"
    d.mkdir()
    for name, identity in nodes.items():
        (d / name).write_text(identity + "\n")
    return d


def test_the_probe_names_what_it_was_told_first_then_what_it_sees_and_opens(tmp_path: Path) -> None:
    devices = device_dir(tmp_path, {"nvidia1": A, "nvidia3": B})
    env = clean_env(FIREDRILL_DEVICE_DIR=str(devices), NVIDIA_VISIBLE_DEVICES=f"{A},{B}")
    lines = probe_lines(env, *access_args(attempt=4, period=0.05, rounds=2), reports=2)
    # the start line is the identity line the invariant watch reads (GPU exclusivity)
    identity = identity_from_lines(lines[:1])
    assert identity is not None and identity.gpus == (A, B)
    first, second = parse_access_lines("\n".join(lines))
    assert (first.round, second.round) == (1, 2) and second.started >= first.ts
    assert first.nodes == ("nvidia1", "nvidia3") and first.opened == ("nvidia1", "nvidia3")
    assert first.identity("nvidia1") == A and first.identity("nvidia3") == B
    assert {a.device: a.outcome for a in first.attempts} == {
        "nvidia0": Outcome.ABSENT, "nvidia1": Outcome.OPENED, "nvidia2": Outcome.ABSENT, "nvidia3": Outcome.OPENED}
    assert first.named == (A, B) and first.seen_count == 2
    # on the reference platform the machine's NVML is not the container's: it is not asked
    assert first.nvml_count is None and "reference platform" in (first.nvml_error or "")


def test_a_pod_asking_for_every_gpu_is_told_nothing_of_its_own(tmp_path: Path) -> None:
    env = clean_env(FIREDRILL_DEVICE_DIR=str(device_dir(tmp_path, {})), NVIDIA_VISIBLE_DEVICES="all")
    lines = probe_lines(env, *access_args(attempt=2, period=0.05, rounds=1))
    (report,) = parse_access_lines("\n".join(lines))
    assert report.visible == "all" and report.gpus == ("all",) and report.named is None
    assert report.seen == () and report.opened == () and report.seen_count == 0


def test_with_the_volume_mounts_strategy_the_devices_are_the_entries_of_the_named_directory(tmp_path: Path) -> None:
    mounts = tmp_path / "nvidia-container-devices"
    mounts.mkdir()
    for uuid in (B, A):
        (mounts / uuid).touch()
    env = clean_env(FIREDRILL_DEVICE_DIR=str(device_dir(tmp_path, {"nvidia0": A})), NVIDIA_VISIBLE_DEVICES=str(mounts))
    (report,) = parse_access_lines("\n".join(probe_lines(env, *access_args(attempt=1, period=0.05, rounds=1))))
    assert report.visible == str(mounts) and report.named == (A, B)


def test_on_a_real_node_nvml_counts_too(tmp_path: Path) -> None:
    """Without a device directory the probe reads /dev (this machine has no GPU node) and asks NVML, here the
    driver stand-in (one GPU): NVML's count is a witness of its own."""
    if fakegpu.compiler() is None:
        pytest.skip("no C compiler (cc/gcc) to build the driver stand-in")
    driver = fakegpu.build(tmp_path / "driver")
    env = clean_env(LD_LIBRARY_PATH=str(driver), FAKE_GPU_POOL=str(tmp_path / "pool"))
    (report,) = parse_access_lines("\n".join(probe_lines(env, *access_args(attempt=1, period=0.05, rounds=1))))
    assert report.directory == "/dev" and report.nvml_count == 1 and len(report.nvml_uuids) == 1
    assert report.seen_count == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="making character devices (mknod) needs root")
def test_on_a_slurm_node_it_reads_slurms_own_indexes_and_sees_only_what_it_can_open(tmp_path: Path) -> None:
    """A bare-metal Slurm node: every job shares the host's /dev (``--dev``), so a device node there is not
    seen; one whose open passed access control is, even where no driver answers it (ENXIO: a simulated GPU).
    What told the job its GPUs is SLURM_STEP_GPUS, the node's indexes."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for minor in range(3):  # NVIDIA's major, which no driver on this machine answers: open() gives ENXIO
        os.mknod(dev / f"nvidia{minor}", 0o600 | 0o020000, os.makedev(195, 250 + minor))
    env = clean_env(SLURM_STEP_GPUS="1,2", CUDA_VISIBLE_DEVICES="0,1")
    (report,) = parse_access_lines("\n".join(probe_lines(env, *access_args(attempt=3, period=0.05, rounds=1,
                                                                             dev=str(dev)))))
    assert (report.told_by, report.visible, report.named, report.shared_dev) == ("SLURM_STEP_GPUS", "1,2",
                                                                                 ("1", "2"), True)
    assert {a.device: a.outcome for a in report.attempts} == dict.fromkeys(report.nodes, Outcome.UNBACKED)
    assert report.seen == report.opened == ("nvidia0", "nvidia1", "nvidia2")  # nothing here confines it
    # the same node, with the device cgroup refusing nvidia0: it is present but not seen
    confined = AccessReport(1, 1.0, 1.1, str(dev), report.nodes, "1,2", ("1", "2"), "SLURM_STEP_GPUS", True, None,
                            attempts=(Attempt("nvidia0", Outcome.DENIED), *report.attempts[1:]))
    assert confined.seen == ("nvidia1", "nvidia2") and confined.seen_count == 2
    pod = ProbePod("acc-1", "n1", 2, (confined,), label="job 7 (acc-1)")
    assert not exactly_own([pod]).broken
    assert "job 7 (acc-1) on node n1 requested 2 GPUs but opened 2 GPUs" in opened_beyond([pod], 1).broken[0]
    assert "SLURM_STEP_GPUS=1,2" in seen_beyond([pod], 0).broken[0]


def test_the_pod_asks_for_its_gpus_and_lands_on_the_node() -> None:
    pod = access_pod("acc-1", "ns", "img", resource="nvidia.com/gpu", gpus=0, node="n1",
                     args=access_args(attempt=8), ask_all=True, tolerations=({"key": "nvidia.com/gpu"},))
    (c,) = pod["spec"]["containers"]
    assert "resources" not in c and {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"} and pod["spec"]["tolerations"]
    two = access_pod("acc-2", "ns", "img", resource="nvidia.com/gpu", gpus=2, node="n1", args=[])
    assert two["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert all(e["name"] != "NVIDIA_VISIBLE_DEVICES" for e in two["spec"]["containers"][0]["env"])


def test_lines_that_are_not_access_reports_are_ignored() -> None:
    assert parse_access_line("hello") is None
    assert parse_access_line('FIREDRILL-PROBE {"event": "start", "gpus": []}') is None
    assert parse_access_line('FIREDRILL-PROBE {"event": "access", "round": 1') is None
    assert parse_access_line('FIREDRILL-PROBE {"event": "access"}') is None


def test_only_whole_gpu_nodes_are_chosen() -> None:
    def node(**labels: str) -> dict[str, object]:
        return {"metadata": {"name": "n", "labels": labels}}
    assert whole_gpu_node(node()) and whole_gpu_node(node(**{"firedrill.dev/partition-mode": "none"}))
    assert not whole_gpu_node(node(**{"nvidia.com/mig.strategy": "single"}))
    assert not whole_gpu_node(node(**{"nvidia.com/gpu.replicas": "4"}))
    assert not whole_gpu_node(node(**{"firedrill.dev/partition-mode": "time-slicing"}))


# ----------------------------------------------------------------------------------------------- judging


def report(nodes: dict[str, str | None], *, tried: int = 8, visible: str | None = None, started: float = 10.0,
           round_: int = 1, nvml: int | None = None, made: dict[str, str] | None = None) -> AccessReport:
    """A round in which the probe found ``nodes`` (device -> identity) and opened them, and found nothing else
    among ``nvidia0`` .. ``nvidia<tried-1>`` (it tries its own nodes whatever ``tried`` is, as the program does)."""
    attempts = []
    for name in sorted({*nodes, *(f"nvidia{i}" for i in range(tried))}, key=lambda n: int(n[6:])):
        if name in nodes:
            attempts.append(Attempt(name, Outcome.OPENED, nodes[name]))
        elif made and name in made:
            attempts.append(Attempt(name, Outcome.OPENED if made[name] == "opened" else Outcome.ABSENT, None,
                                    made[name]))
        else:
            attempts.append(Attempt(name, Outcome.ABSENT))
    gpus = None if visible is None else tuple(v for v in visible.split(",") if v)
    return AccessReport(round_, started, started + 0.01, "/dev", tuple(nodes), visible, gpus, "NVIDIA_VISIBLE_DEVICES",
                        False, nvml, (), None, tuple(attempts))


EVERY = {f"nvidia{i}": f"GPU-{i}" for i in range(8)}


def test_a_pod_that_requested_none_and_sees_none_passes_and_one_that_sees_all_fails_naming_them() -> None:
    clean = ProbePod("acc-1", "gpu-node-0", 0, (report({}, visible="all"),))
    assert seen_beyond([clean], 0).broken == [] and opened_beyond([clean], 0).broken == []
    leaky = ProbePod("acc-1", "gpu-node-0", 0, (report(EVERY, visible="all"),))
    (seen,) = seen_beyond([leaky], 0).broken
    assert seen.startswith("pod acc-1 on node gpu-node-0 requested no GPU but sees 8 GPUs: 8 device nodes "
                           "(nvidia0 (GPU-0), nvidia1 (GPU-1),"), seen
    assert seen.endswith("nvidia7 (GPU-7)); NVIDIA_VISIBLE_DEVICES=all"), seen
    (opened,) = opened_beyond([leaky], 0).broken
    assert opened.startswith("pod acc-1 on node gpu-node-0 requested no GPU but opened 8 GPUs: nvidia0 (GPU-0)")


def test_nvml_counting_more_than_the_device_nodes_is_seeing_them() -> None:
    pod = ProbePod("acc-1", "n", 0, (report({}, nvml=2),))
    (found,) = seen_beyond([pod], 0).broken
    assert "sees 2 GPUs" in found and "NVML counts 2" in found


def test_a_device_node_made_by_the_pod_itself_and_opened_is_reached_through_the_device_cgroup() -> None:
    pod = ProbePod("acc-1", "n", 0, (report({}, made={"nvidia2": "opened", "nvidia3": "denied: Operation not "
                                                                                      "permitted"}),))
    (found,) = opened_beyond([pod], 0).broken
    assert "opened 1 GPU: nvidia2" in found and "through a device node it made itself" in found
    assert seen_beyond([pod], 0).broken  # what it opened it sees


def test_a_pod_sees_exactly_its_own_gpus_by_identity() -> None:
    own = ProbePod("acc-1", "n", 2, (report({"nvidia1": "GPU-1", "nvidia4": "GPU-4"}, visible="GPU-1,GPU-4"),))
    judged = exactly_own([own])
    assert judged.broken == [] and judged.unsettled == []
    indexes = ProbePod("acc-1", "n", 2, (report({"nvidia1": None, "nvidia4": None}, visible="1,4"),))
    assert exactly_own([indexes]).broken == [] and exactly_own([indexes]).unsettled == []


@pytest.mark.parametrize("nodes,visible,words", [
    (EVERY, "GPU-1,GPU-4", "requested 2 GPUs but sees 8 GPUs"),
    ({"nvidia1": "GPU-1"}, "GPU-1,GPU-4", "requested 2 GPUs but sees 1 GPU"),
    ({"nvidia1": "GPU-1", "nvidia5": "GPU-5"}, "GPU-1,GPU-4",
     "was given GPU-1, GPU-4 but sees GPU-5, which it was not given and cannot see GPU-4, which it was given"),
    ({"nvidia1": None, "nvidia5": None}, "1,4", "sees nvidia5, which it was not given"),
])
def test_seeing_more_fewer_or_other_gpus_than_its_own_fails(nodes: dict[str, str | None], visible: str,
                                                            words: str) -> None:
    (found,) = exactly_own([ProbePod("acc-1", "gpu-node-2", 2, (report(nodes, visible=visible),))]).broken
    assert found.startswith("pod acc-1 on node gpu-node-2 requested 2 GPUs") and words in found, found


def test_own_gpus_that_cannot_be_told_apart_are_inconclusive_never_pass() -> None:
    unnamed = ProbePod("acc-1", "n", 1, (report({"nvidia0": None}, visible=None),))
    judged = exactly_own([unnamed])
    assert judged.broken == [] and "was told no device of its own" in judged.unsettled[0]
    unread = ProbePod("acc-1", "n", 1, (report({"nvidia0": None}, visible="GPU-0"),))
    judged = exactly_own([unread])
    assert judged.broken == [] and "could not read which GPU nvidia0 is" in judged.unsettled[0]
    silent = exactly_own([ProbePod("acc-1", "n", 1)])
    assert silent.broken == [] and "wrote no access report" in silent.unsettled[0]


def side_by_side(a_nodes: dict[str, str | None], b_nodes: dict[str, str | None], *, b_late: float = 0.5,
                 tried: int = 8, visible_b: str = "GPU-1") -> list[ProbePod]:
    """Pods a and b on one node: each reports at 10.0 and again at 10.0 + ``b_late``."""
    def pod(name: str, nodes: dict[str, str | None], visible: str) -> ProbePod:
        return ProbePod(name, "gpu-node-1", 1, (report(nodes, visible=visible, started=10.0, tried=tried),
                                                 report(nodes, visible=visible, started=10.0 + b_late, round_=2,
                                                        tried=tried)))
    return [pod("acc-1", a_nodes, "GPU-0"), pod("acc-2", b_nodes, visible_b)]


def test_pods_that_hold_their_own_gpus_reach_none_of_each_other() -> None:
    judged = crossings(side_by_side({"nvidia0": "GPU-0"}, {"nvidia1": "GPU-1"}))
    assert judged.broken == [] and judged.unsettled == [] and judged.count == 0


def test_a_pod_that_opens_its_neighbours_gpu_fails_naming_both_pods_the_node_and_the_gpu() -> None:
    judged = crossings(side_by_side(EVERY, EVERY))
    assert judged.count == 2 and len(judged.broken) == 2
    assert judged.broken[0] == ("pod acc-2 on node gpu-node-1 opened nvidia0 (GPU-0), which pod acc-1 holds (pod "
                                "acc-2 was given GPU-1; pod acc-1 was given GPU-0)")
    assert judged.broken[1].startswith("pod acc-1 on node gpu-node-1 opened nvidia1 (GPU-1), which pod acc-2 holds")
    # two pods told the same GPU (double-booked) reach each other's too
    double = crossings(side_by_side({"nvidia0": "GPU-0"}, {"nvidia0": "GPU-0"}, visible_b="GPU-0"))
    assert double.count == 2 and "opened nvidia0 (GPU-0), which pod" in double.broken[0]
    # a holder told nothing of its own holds whatever it opened: here nvidia0 too, which acc-1 reaches
    unnamed = crossings(side_by_side({"nvidia0": None}, {"nvidia1": None, "nvidia0": None}, visible_b=""))
    assert unnamed.count == 2
    assert unnamed.broken[1].startswith("pod acc-1 on node gpu-node-1 opened nvidia0, which pod acc-2 holds")


def test_a_crossing_that_was_never_tried_while_held_is_inconclusive() -> None:
    early = crossings(side_by_side({"nvidia0": "GPU-0"}, {"nvidia1": "GPU-1"}, b_late=-5.0))
    assert early.broken == [] and any("made no attempt after pod" in u for u in early.unsettled)
    narrow = side_by_side({"nvidia0": "GPU-0"}, {"nvidia1": "GPU-1"}, tried=1)
    judged = crossings(narrow)
    assert any("pod acc-1 never tried nvidia1, which pod acc-2 holds" in u for u in judged.unsettled), judged


# --------------------------------------------------------------------------------------- the feature's rules


def checked(step: str, text: str = "", **values: int) -> Checked:
    return Checked(step, dict(values), text)


def test_the_node_must_have_room_for_every_probe_pod_and_trying_needs_two() -> None:
    ok = [checked(gpu_node.__name__, count=2), checked(pods_side_by_side.__name__, count=2, gpus=1),
          checked(try_each_other.__name__)]
    assert list(_enough_free(ok)) == []
    short = [checked(gpu_node.__name__, count=1), checked(pod_with_gpus.__name__, gpus=2)]
    ((index, error),) = list(_enough_free(short))
    assert index == 1 and "request 2 GPUs but the node is only required to have 1 free" in str(error)
    alone = [checked(gpu_node.__name__, count=2), checked(pod_with_gpus.__name__, gpus=2),
             checked(try_each_other.__name__, "each pod tries to open the GPUs the others hold")]
    ((index, error),) = list(_enough_free(alone))
    assert index == 2 and "start two pods or more first" in str(error)
