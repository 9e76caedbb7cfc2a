"""The container runtime: pods whose containers have a command run as real child processes.

The pod sync runs on an in-memory API and a virtual clock (deadlines, SIGKILL after the grace
period, the device's integration); the processes, their pipes and signals are real.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from refplatform.agent.clock import VirtualClock
from refplatform.agent.device import Device, socket_path_for
from refplatform.agent.events import PodEventRecorder
from refplatform.agent.logs import LogStore
from refplatform.agent.metrics import GpuCollector, GpuMetrics
from refplatform.agent.podip import PodAddressPool
from refplatform.agent.pods import PodSync
from refplatform.agent.runtime import POD_NICENESS, ProcessWorkload, grace_seconds, has_command
from refplatform.agent.volumes import NodeDirs
from refplatform.cluster import wait_until
from refplatform.defects import Defect
from refplatform.gpu.device import DeviceSet
from refplatform.gpu.identity import gpu_uuid, mig_uuid
from refplatform.gpu.partition import parse_partition_config

from .fakeapi import FakeApi

NODE = "gpu-node-0"
PY = os.path.basename(sys.executable)
DEADLINE = 20.0


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    def __init__(self, data: Path, defects: frozenset[Defect] = frozenset()) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.data = data
        self.store = LogStore(data / "logs" / NODE)
        self.dirs = NodeDirs(data, NODE, defects)
        self.driver = Device(socket_path_for(data, NODE), self.clock,
                             stalls_as_compute=Defect.STALLS_AS_COMPUTE in defects)
        self.driver.start()
        self.events = PodEventRecorder(self.api, NODE)
        self.sync = PodSync(self.api, NODE, self.store, self.clock, dirs=self.dirs,  # type: ignore[arg-type]
                            addresses=PodAddressPool("127.10.0.0/24"), driver=self.driver, shutdown_grace=1.0,
                            events=self.events, gpu_count=8, mistell_gpus=Defect.GPU_DOUBLE_BOOK in defects,
                            visible_to_all=Defect.VISIBLE_TO_ALL in defects)

    def add_pod(self, name: str, containers: list[dict[str, Any]], *, annotations: dict[str, str] | None = None,
                volumes: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {},
                         "labels": {"app": "canary"}},
            "spec": {"nodeName": NODE, "containers": containers, "volumes": volumes or [], **spec},
            "status": {"phase": "Pending"},
        }
        stored = self.api.put_object(pod_path(name), pod)
        self.sync._apply("ADDED", stored)
        return stored

    def refresh(self) -> None:
        for path, obj in list(self.api.objects.items()):
            if "/pods/" in path:
                self.sync._apply("MODIFIED", obj)
        for pod in list(self.sync.pods().values()):
            if pod_path(pod["metadata"]["name"]) not in self.api.objects:
                self.sync._apply("DELETED", pod)

    def step(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.sync.sync_once()
        self.refresh()
        for w in self.sync.workers.values():
            w.retry_at = 0.0

    def until(self, predicate: Callable[[], bool], what: str) -> None:
        def check() -> bool:
            self.step()
            return predicate()
        wait_until(check, DEADLINE, what, interval=0.02)

    def pod(self, name: str) -> dict[str, Any]:
        return self.api.objects[pod_path(name)]

    def phase(self, name: str) -> str:
        return str(self.pod(name)["status"].get("phase"))

    def log(self, name: str, container: str = "main") -> list[str]:
        clog = self.store.get("default", name, container)
        return [] if clog is None else [t for _, t in clog.snapshot()[0]]

    def close(self) -> None:
        self.sync.stop()
        self.driver.stop()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.close()


def python(code: str, *args: str, name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "firedrill/canary", "command": [PY, "-c", code], "args": list(args), **extra}


def terminated(pod: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][index]["state"]["terminated"]  # type: ignore[no-any-return]


def test_the_rule_a_command_means_a_real_process() -> None:
    assert has_command({"spec": {"containers": [{"name": "a", "command": ["x"]}]}})
    assert not has_command({"spec": {"containers": [{"name": "a", "args": ["x"]}]}})
    assert grace_seconds({"metadata": {"deletionGracePeriodSeconds": 5}, "spec": {"terminationGracePeriodSeconds": 9}}) == 5
    assert grace_seconds({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 9}}) == 9
    assert grace_seconds({}) == 30


def test_output_goes_to_the_log_and_the_exit_code_to_the_container_state(env: Env) -> None:
    env.add_pod("p", [python("import sys; print('hello', flush=True); print('oops', file=sys.stderr); sys.exit(3)")])
    env.until(lambda: env.phase("p") == "Failed", "pod p Failed")
    pod = env.pod("p")
    t = terminated(pod)
    assert (t["exitCode"], t["reason"]) == (3, "Error")
    assert sorted(env.log("p")) == ["hello", "oops"]
    assert pod["status"]["podIP"] == "127.10.0.2" and pod["status"]["hostIP"] == "127.0.0.1"
    env.add_pod("ok", [python("pass")])
    env.until(lambda: env.phase("ok") == "Succeeded", "pod ok Succeeded")
    assert (terminated(env.pod("ok"))["exitCode"], terminated(env.pod("ok"))["reason"]) == (0, "Completed")
    assert env.pod("ok")["status"]["podIP"] == "127.10.0.3"  # its own address


def test_a_pod_s_processes_run_nicer_than_the_agent_as_kube_reserved_keeps_cpu_for_the_node(env: Env) -> None:
    env.add_pod("n", [python("import os; print(os.nice(0), flush=True)")])
    env.until(lambda: env.phase("n") == "Succeeded", "pod n Succeeded")
    assert env.log("n") == [str(min(19, os.nice(0) + POD_NICENESS))]
    assert POD_NICENESS > 0


SHOW = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'env': dict(os.environ)}))"


def test_command_args_env_working_dir_and_volumes(env: Env) -> None:
    container = python(SHOW, "--ip=$(POD_IP)", "$(CKPT)", "/ckpt/run-1", "$$(POD_IP)", "/scratch", name="trainer")
    container.update(
        env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
             {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
             {"name": "CKPT", "value": "/ckpt"},
             {"name": "PEER", "value": "$(POD_IP):29500"}],
        workingDir="/scratch/work",
        volumeMounts=[{"name": "ckpt", "mountPath": "/ckpt"}, {"name": "scratch", "mountPath": "/scratch"}])
    env.add_pod("v", [container], volumes=[{"name": "ckpt", "nfs": {"server": "nfs-0", "path": "/exports/jobs"}},
                                           {"name": "scratch", "emptyDir": {}}])
    env.until(lambda: env.phase("v") == "Succeeded", "pod v Succeeded")
    shown = json.loads(env.log("v", "trainer")[0])
    uid = env.pod("v")["metadata"]["uid"]
    nfs = str(env.data / "nfs/nfs-0/exports/jobs")
    scratch = str(env.data / f"nodes/{NODE}/pods/{uid}/volumes/scratch")
    assert shown["argv"] == ["--ip=127.10.0.2", nfs, nfs + "/run-1", "$(POD_IP)", scratch]
    assert shown["cwd"] == scratch + "/work"
    e = shown["env"]
    assert (e["POD_IP"], e["NODE"], e["APP"], e["CKPT"], e["PEER"]) == ("127.10.0.2", NODE, "canary", nfs, "127.10.0.2:29500")
    assert e["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert e["FIREDRILL_DEVICE_SOCKET"] == str(env.driver.path) and e["HOSTNAME"] == "v"
    # The emptyDir goes with the pod; the nfs directory stays.
    del env.api.objects[pod_path("v")]
    env.until(lambda: not env.sync.workers, "the pod retired")
    assert not Path(scratch).exists() and Path(nfs).is_dir()


@pytest.mark.parametrize(("container", "message"), [
    ({"name": "main", "command": ["no-such-program-xyz"]},
     "spec.containers[0].command[0]: executable 'no-such-program-xyz' not found in PATH"),
    ({"name": "main", "command": [PY], "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]},
     "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: unsupported field path 'status.phase'"),
    ({"name": "main", "command": [PY], "workingDir": "/no/such/dir"},
     "spec.containers[0].workingDir: /no/such/dir does not exist on the node"),
    ({"name": "kubelet-stop", "command": ["nsenter", "-t", "1", "-m", "--", "systemctl", "stop", "kubelet"],
      "securityContext": {"privileged": True}},
     "container 'kubelet-stop': securityContext.privileged: the reference platform runs containers as processes"),
])
def test_bad_specs_fail_the_pod_naming_the_field(env: Env, container: dict[str, Any], message: str) -> None:
    env.add_pod("bad", [container])
    env.step()
    assert env.phase("bad") == "Failed"
    t = terminated(env.pod("bad"))
    assert (t["exitCode"], t["reason"]) == (128, "StartError") and t["message"].startswith(message)
    assert message in env.log("bad", container["name"])[0]


def test_a_pod_asking_for_the_host_s_namespaces_is_refused_before_anything_runs(env: Env, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env.add_pod("hostpid", [python(f"open({str(marker)!r}, 'w').close()")], hostPID=True)
    env.step()
    assert terminated(env.pod("hostpid"))["message"].startswith("spec.hostPID: the reference platform runs")
    assert not marker.exists()


def test_a_pod_mixing_processes_and_a_simulated_container_is_refused(env: Env) -> None:
    env.add_pod("mixed", [python("pass"), {"name": "side", "image": "busybox"}])
    env.step()
    assert terminated(env.pod("mixed"))["message"].startswith("spec.containers[1].command: required")


TRAP = """
import os, signal, sys, time
def on_term(signum, frame):
    os.write(1, b'got SIGTERM\\n')  # not print: the signal may land inside print('ready') (a reentrant write)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print('ready', flush=True)
while True:
    time.sleep(0.05)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))
print('ready', flush=True)
while True:
    time.sleep(0.05)
"""


def delete(env: Env, name: str, grace: int) -> None:
    meta = env.api.objects[pod_path(name)]["metadata"]
    meta["deletionTimestamp"] = "2026-11-30T00:01:00Z"
    meta["deletionGracePeriodSeconds"] = grace
    env.refresh()


def test_deletion_sends_sigterm_then_deletes_with_grace_zero(env: Env) -> None:
    env.add_pod("t", [python(TRAP)])
    env.until(lambda: env.log("t") == ["ready"], "the process to start")
    delete(env, "t", 30)
    env.until(lambda: pod_path("t") not in env.api.objects, "the pod deleted")
    assert env.log("t") == ["ready", "got SIGTERM"]
    (call,) = env.api.verbs("DELETE")
    assert call[2]["params"] == {"gracePeriodSeconds": 0}


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period_without_blocking(env: Env) -> None:
    env.add_pod("s", [python(STUBBORN)])
    env.until(lambda: env.log("s") == ["ready"], "the process to start")
    wl = env.sync.workers[env.pod("s")["metadata"]["uid"]].workload
    assert isinstance(wl, ProcessWorkload)
    delete(env, "s", 10)
    env.until(lambda: "ignoring SIGTERM" in env.log("s"), "SIGTERM delivered")
    env.step(5)  # within the grace period: still running, the pod stays
    assert wl.running and pod_path("s") in env.api.objects and env.api.verbs("DELETE") == []
    env.step(6)  # past it: SIGKILL
    env.until(lambda: pod_path("s") not in env.api.objects, "the pod deleted after SIGKILL")
    assert wl.exit is not None and wl.exit.code == 137


def test_the_device_observes_the_process_and_the_annotations_come_from_it(env: Env) -> None:
    sender = """
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ['FIREDRILL_DEVICE_SOCKET']
s.sendto(json.dumps({'pid': os.getpid(), 'state': sys.argv[1], 'bytes': 0}).encode(), path)
print(json.dumps({'seq': 1, 'ts': '2026-11-30T00:00:00.500000Z', 'event': 'resumed', 'from_step': 10,
                  'checkpoint': 'ckpt-0000000010.json', 'skipped': []}), flush=True)
print(json.dumps({'seq': 2, 'ts': '2026-11-30T00:00:00.750000Z', 'event': 'step', 'step': 11, 'wall_s': 0.25}),
      flush=True)
time.sleep(60)
"""
    env.add_pod("d", [python(sender, "input")])
    env.until(lambda: env.driver.accepted == 1 and "firedrill.dev/step" in env.pod("d")["metadata"]["annotations"],
              "the datagram and the step line")
    env.step(2.0)
    ann = env.pod("d")["metadata"]["annotations"]
    assert ann["firedrill.dev/input-stall-seconds"] == "2.000" and ann["firedrill.dev/stepped-seconds"] == "2.000"
    assert ann["firedrill.dev/comm-stall-seconds"] == "0.000"
    assert (ann["firedrill.dev/step"], ann["firedrill.dev/checkpoint-step"], ann["firedrill.dev/step-seconds"]) == (
        "11", "10", "0.25")
    assert ann["firedrill.dev/progress-at"] == "2026-11-30T00:00:02.000Z"
    env.events.drain()
    resumed = [o for p, o in env.api.objects.items() if "/events/" in p and o["reason"] == "Resumed"]
    assert [(e["message"], e["eventTime"]) for e in resumed] == [
        ("Resumed training at step 11 beyond checkpoint 10", "2026-11-30T00:00:00.750000Z")]


def test_with_stalls_as_compute_the_device_reports_input_as_compute(tmp_path: Path) -> None:
    env = Env(tmp_path, frozenset({Defect.STALLS_AS_COMPUTE}))
    try:
        sender = ("import json, os, socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
                  "s.sendto(json.dumps({'pid': os.getpid(), 'state': 'input'}).encode(), "
                  "os.environ['FIREDRILL_DEVICE_SOCKET']); time.sleep(60)")
        env.add_pod("d", [python(sender)])
        env.until(lambda: env.driver.accepted == 1, "the datagram")
        env.step(2.0)
        ann = env.pod("d")["metadata"]["annotations"]
        assert ann["firedrill.dev/input-stall-seconds"] == "0.000" and ann["firedrill.dev/stepped-seconds"] == "2.000"
    finally:
        env.close()


def test_a_pod_found_running_after_an_agent_restart_is_restarted(env: Env) -> None:
    env.add_pod("r", [python("print('run', flush=True)")])
    env.pod("r")["status"] = {"phase": "Running", "podIP": "127.10.0.77", "containerStatuses": [
        {"name": "main", "restartCount": 2, "state": {"running": {"startedAt": "2026-11-30T00:00:00Z"}}}]}
    env.refresh()
    env.until(lambda: env.phase("r") == "Succeeded", "the restarted container to finish")
    cs = env.pod("r")["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 3 and cs["lastState"]["terminated"]["reason"] == "Unknown"
    assert env.pod("r")["status"]["podIP"] == "127.10.0.77"  # it keeps its address


def test_stop_terminates_running_processes(env: Env) -> None:
    env.add_pod("t", [python(TRAP)])
    env.until(lambda: env.log("t") == ["ready"], "the process to start")
    wl = env.sync.workers[env.pod("t")["metadata"]["uid"]].workload
    assert isinstance(wl, ProcessWorkload)
    pid = wl.pids()["main"]
    env.sync.stop()
    assert env.log("t")[-1] == "got SIGTERM"
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_the_dcgm_gauges_of_a_process_pod_come_from_the_device(env: Env) -> None:
    metrics = GpuMetrics(GpuCollector(NODE, env.sync, 2, "NVIDIA-H200", "H200"))
    sender = (
        "import json, os, socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        "s.sendto(json.dumps({'pid': os.getpid(), 'state': 'compute'}).encode(), "
        "os.environ['FIREDRILL_DEVICE_SOCKET']); time.sleep(60)")
    c = python(sender)
    c["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    env.add_pod("g", [c], annotations={"firedrill.dev/mfu": "0.5", "firedrill.dev/gpu-index": "1"})
    env.until(lambda: env.driver.accepted == 1, "the datagram")
    env.step(2.0)

    def gauge(name: str) -> dict[str, float]:
        fams = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
        return {s.labels["gpu"]: s.value for s in fams[name].samples}

    assert gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == {"0": 0.0, "1": 1.0}
    assert gauge("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == {"0": 0.0, "1": 0.5}
    assert gauge("DCGM_FI_DEV_GPU_UTIL") == {"0": 0.0, "1": 100.0}


def test_after_the_first_list_the_directories_of_pods_deleted_meanwhile_are_removed(env: Env) -> None:
    env.add_pod("live", [python("import time; time.sleep(60)")])
    live_uid = env.pod("live")["metadata"]["uid"]
    stale = env.dirs.pod_dir("deleted-while-away") / "volumes" / "scratch"
    stale.mkdir(parents=True)
    env.step()  # not listed yet: nothing is collected
    assert stale.exists()
    env.sync._synced.set()
    env.step()
    assert not env.dirs.pod_dir("deleted-while-away").exists()
    assert env.dirs.pod_uids() == [live_uid]


def test_each_container_of_a_pod_is_its_own_process_with_its_own_state_and_log(env: Env) -> None:
    env.add_pod("two", [python("print('one', flush=True)", name="quick"),
                        python("import time; print('two', flush=True); time.sleep(60)", name="slow")])
    env.until(lambda: env.log("two", "quick") == ["one"] and env.log("two", "slow") == ["two"]
              and "terminated" in env.pod("two")["status"]["containerStatuses"][0]["state"], "the quick one to end")
    st = env.pod("two")["status"]
    assert st["phase"] == "Running"
    assert [("terminated" in c["state"], c["ready"]) for c in st["containerStatuses"]] == [(True, False), (False, True)]
    assert {c["type"]: c["status"] for c in st["conditions"]}["ContainersReady"] == "False"
    delete(env, "two", 5)
    env.until(lambda: pod_path("two") not in env.api.objects, "the pod deleted")


def test_a_force_deleted_pods_processes_get_its_grace_period_then_sigkill(env: Env) -> None:
    env.add_pod("f", [python(STUBBORN)], terminationGracePeriodSeconds=2)
    env.until(lambda: env.log("f") == ["ready"], "the process to start")
    wl = env.sync.workers[env.pod("f")["metadata"]["uid"]].workload
    assert isinstance(wl, ProcessWorkload)
    del env.api.objects[pod_path("f")]  # gone from the API at once (grace 0)
    env.until(lambda: "ignoring SIGTERM" in env.log("f"), "SIGTERM delivered")
    assert wl.running and env.sync.workers == {}  # still terminating, off the sync's books
    env.step(3)
    env.until(lambda: not wl.running, "SIGKILL after the pod's 2 s")
    assert wl.exit is not None and wl.exit.code == 137
    env.step()
    assert env.sync._dying == {}


SHOW_GPUS = "import os; print(os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>'), flush=True)"


@pytest.mark.parametrize("defects,told", [
    (frozenset(), {"two": [4, 5], "other": [0, 1, 2]}),
    # the books say 4,5 and 0,1,2; every pod is told the first GPUs
    (frozenset({Defect.GPU_DOUBLE_BOOK}), {"two": [0, 1], "other": [0, 1, 2]}),
])
def test_a_pod_is_told_the_uuids_of_the_gpus_bound_to_it(tmp_path: Path, defects: frozenset[Defect],
                                                         told: dict[str, list[int]]) -> None:
    """As the device plugin's Allocate does: NVIDIA_VISIBLE_DEVICES names the UUIDs of the GPUs the scheduler
    chose (its firedrill.dev/gpu-index), or, for a pod another scheduler bound, the lowest GPUs no other pod of
    the node holds (the kubelet's device manager); a pod that asks for no GPU is told nothing."""
    env = Env(tmp_path, defects)
    try:
        gpus = {"resources": {"limits": {"nvidia.com/gpu": "2"}}}
        env.add_pod("two", [python(SHOW_GPUS, **gpus)], annotations={"firedrill.dev/gpu-index": "4,5"})
        env.add_pod("none", [python(SHOW_GPUS)], annotations={"firedrill.dev/gpu-index": "4,5"})
        env.until(lambda: env.log("two") != [], "the first pod's line")
        env.add_pod("other", [python(SHOW_GPUS, resources={"limits": {"nvidia.com/gpu": "3"}})])
        env.until(lambda: all(env.log(n) for n in ("two", "none", "other")), "every pod's line")
        for name, indices in told.items():
            assert env.log(name) == [",".join(gpu_uuid(NODE, g) for g in indices)], name
        assert env.log("none") == ["<unset>"]
        assert gpu_uuid(NODE, 4) != gpu_uuid(NODE, 5) != gpu_uuid("gpu-node-1", 5)
        assert gpu_uuid(NODE, 4) == gpu_uuid(NODE, 4) and gpu_uuid(NODE, 4).startswith("GPU-")
    finally:
        env.close()


@pytest.mark.parametrize("config,mistell,told", [
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, False, ["MIG 0/0", "MIG 0/1", "MIG 0/2"]),
    ({"mode": "mig-mixed", "layout": [["1g.18gb"] * 7]}, True, ["MIG 0/0", "MIG 0/0", "MIG 0/0"]),
    ({"mode": "time-slicing", "replicas": 2}, False, ["GPU 0", "GPU 1", "GPU 0"]),  # replicas share, by promise
])
def test_a_tenant_of_a_partitioned_node_is_told_its_slice(config: dict[str, Any], mistell: bool,
                                                          told: list[str]) -> None:
    """A MIG tenant is told its instance's UUID, a shared replica the UUID of the GPU it shares; with
    gpu-double-book every tenant is told the first slice of its kind."""
    devices = DeviceSet(parse_partition_config(config), "H200", 2, 143771)
    sync = PodSync(FakeApi(), NODE, None, VirtualClock(), devices=devices, gpu_count=2,  # type: ignore[arg-type]
                   mistell_gpus=mistell)
    resource = sorted(devices.resources())[0]
    names = {f"MIG {g}/{i}": mig_uuid(NODE, g, i) for g in range(2) for i in range(7)}
    names |= {f"GPU {g}": gpu_uuid(NODE, g) for g in range(2)}
    seen = []
    for i in range(3):
        worker = SimpleNamespace(key=f"default/t{i}")
        pod = {"metadata": {"name": f"t{i}"}, "spec": {"containers": [{"resources": {"limits": {resource: "1"}}}]}}
        devices.allocate(worker.key, {resource: "1"})
        seen.append(sync.visible_devices(worker, pod))  # type: ignore[arg-type]
    assert seen == [names[t] for t in told]
    assert sync.visible_devices(SimpleNamespace(key="default/none"), {"spec": {}}) is None  # type: ignore[arg-type]
