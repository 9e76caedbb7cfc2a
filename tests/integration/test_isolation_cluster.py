"""The partition isolation drill's real-cluster path, with the reference platform standing in for the cluster.

The drill connects through a kubeconfig (no embedded platform), so it takes the path it takes on a customer's
cluster: every tenant pod runs the probe program (a real process under the reference agent, which is the
node's kubelet and runtime), the drill reads the tenants' reports through ``pods/log``, the memory probe's
victim really allocates, and an Xid is injected by the profile's ``fault.xid`` template behind the safety
checks.

There is no GPU here.  What the NVIDIA container runtime does on a real node (mount libcuda.so.1 and
libnvidia-ml.so.1 into a container that asks for driver capabilities) is stood in for by a ``sitecustomize``
on the agents' PYTHONPATH: in a process whose environment asks for capabilities it loads the driver stand-in
(tests/unit/drills/fakegpu), one 2 GiB "GPU" all tenants of the time-sliced node share, whose Xid is a file.
It does so only while the test's "driver installed" marker exists, so the same cluster also shows a node
without a driver.  Which drill code runs with which fake is in each test's docstring; nothing of the drill
is replaced.  The agent's own GPUs are simulated (its Node says ``firedrill.dev/simulated-gpus=true``), for which
the drill would run canary tenants as on the embedded platform; the drills here ask for probe tenants
(``tenants_as``), the form a real GPU node gets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.kinds.isolation.drill import EVERY_ON_GPU, IsolationDrill, TenantForm, partition_config
from drills.records.verdict import DrillInconclusive, DrillResult, Verdict
from drills.target.connect import Target, cluster_target
from drills.target.profile import load_profile
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.unit.drills import fakegpu

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(fakegpu.compiler() is None, reason="no C compiler to build the driver stand-in")]

NODE = "part-node"

SITECUSTOMIZE = '''\
"""Test stand-in for the NVIDIA container runtime: gives a container that asks for driver capabilities the
driver's libraries (the stand-ins in {driver}) while {enabled} exists."""
import os
if os.environ.get("NVIDIA_DRIVER_CAPABILITIES") and os.path.exists({enabled!r}):
    os.environ.update(FAKE_GPU_POOL={pool!r}, FAKE_GPU_CAPACITY_MIB="2048", FAKE_GPU_FAULT_FILE={fault!r},
                      FAKE_GPU_MINOR="0")
    import ctypes
    for _name in ("libnvidia-ml.so.1", "libcuda.so.1"):
        ctypes.CDLL(os.path.join({driver!r}, _name), mode=ctypes.RTLD_GLOBAL)
'''

INJECT = '''\
import pathlib, sys
node, gpu, instance, xid = sys.argv[1:5]
with open(sys.argv[5], "a") as log:
    log.write(f"inject {node} {gpu} {instance} {xid}\\n")
pathlib.Path(sys.argv[6]).touch()
'''

RESTORE = '''\
import pathlib, sys
with open(sys.argv[3], "a") as log:
    log.write(f"restore {sys.argv[1]} {sys.argv[2]}\\n")
pathlib.Path(sys.argv[4]).unlink(missing_ok=True)
'''


@dataclass
class Rig:
    cluster: Cluster
    dir: Path
    enabled: Path
    fault: Path
    calls: Path

    def profile(self, tmp_path: Path, max_gpu_share: float = 0.5, xid: bool = True) -> Path:
        doc = {"name": "refplatform-as-a-cluster", "flavor": "volcano", "namespace": "default", "queue": "default",
               "canary_image": "python:3.11-slim",
               "fault": {"method": "kubelet-stop", "timeout_seconds": 20},
               "safety": {"allow_label": "nvidia.com/gpu.present=true", "max_nodes": 1,
                          "max_gpu_share": max_gpu_share}}
        if xid:
            doc["fault"]["xid"] = {
                "command_template": f"{sys.executable} {self.dir / 'inject.py'} {{node}} {{gpu}} {{instance}} "
                                    f"{{xid}} {self.calls} {self.fault}",
                "restore_template": f"{sys.executable} {self.dir / 'restore.py'} {{node}} {{gpu}} {self.calls} "
                                    f"{self.fault}"}
        path = tmp_path / "profile.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def calls_made(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    base = tmp_path_factory.mktemp("isolation-cluster")
    driver = fakegpu.build(base / "driver")
    site = base / "site"
    site.mkdir()
    rig_dir = base / "rig"
    rig_dir.mkdir()
    enabled, fault, pool = rig_dir / "driver-installed", rig_dir / "xid-gpu0", rig_dir / "pool"
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(driver=str(driver), enabled=str(enabled),
                                                                pool=str(pool), fault=str(fault)))
    (rig_dir / "inject.py").write_text(INJECT)
    (rig_dir / "restore.py").write_text(RESTORE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(site)) if p))
        cluster = Cluster(ClusterSpec(base / "c", nodes=1, spares=0, profile="tuned"))
        try:
            cluster.start()
            cluster.wait_ready(60)
            config = base / "partition.yaml"
            config.write_text(yaml.safe_dump(partition_config("time-slicing x 4", "H100-80GB")))
            cluster.start_agent(NODE, gpus=1, gpu_model="H100-80GB", extra=("--partition-config", str(config)))
            with cluster.http_client() as http:
                def ready() -> bool:
                    answer = http.get(f"/api/v1/nodes/{NODE}")
                    status = answer.json().get("status") if answer.status_code == 200 else None
                    return any(c.get("type") == "Ready" and c.get("status") == "True"
                               for c in (status or {}).get("conditions") or [])
                wait_until(ready, 60, f"{NODE} Ready")
            yield Rig(cluster, rig_dir, enabled, fault, rig_dir / "calls.log")
        finally:
            cluster.stop()


@pytest.fixture
def drill_on(rig: Rig, tmp_path: Path) -> Iterator[Any]:
    made: list[tuple[Target, IsolationDrill]] = []

    def make(run_id: str, tenants_as: TenantForm | None = TenantForm.PROBE, **profile: Any) -> IsolationDrill:
        target = cluster_target(Path(str(rig.cluster.kubeconfig)), None, load_profile(rig.profile(tmp_path, **profile)))
        assert target.embedded is None, "the drill must take the real-cluster path"
        # the node's GPUs are the agent's simulated ones, which alone would make the drill run canary tenants;
        # the rig's stand-in driver is for the probe path, so the tests ask for it
        drill = IsolationDrill(target, DrillResult("partition-isolation"), run_id, probe_timeout=30.0,
                               tenants_as=tenants_as)
        made.append((target, drill))
        return drill

    yield make
    for target, drill in made:
        drill.rollback()
        target.close()
    rig.enabled.unlink(missing_ok=True)
    rig.fault.unlink(missing_ok=True)
    rig.calls.unlink(missing_ok=True)


def test_the_shipped_sentence_finds_the_cluster_node_it_describes_or_names_what_it_saw(rig: Rig,
                                                                                      drill_on: Any) -> None:
    """'Given a node of one H100-80GB GPU partitioned as time-slicing x 4' on a real cluster picks the node that
    advertises it; left to the node, its simulated GPUs get canary tenants. A layout no node has is
    INCONCLUSIVE, naming the layout wanted and each partitioned node's difference."""
    drill = drill_on("fdiso0", tenants_as=None)
    drill.use_partitioned_node(1, "H100-80GB", "time-slicing x 4")
    assert drill.node == NODE and drill.tenants_as is TenantForm.CANARY
    assert drill.result.details["partition_layout"]["simulated_gpus"] is True
    other = drill_on("fdiso4", tenants_as=None)
    with pytest.raises(DrillInconclusive) as caught:
        other.use_partitioned_node(1, "H200", "MIG 7 x 1g.18gb")
    assert "no node with the allow label nvidia.com/gpu.present=true advertises 1 H200 GPU partitioned as " \
           "MIG 7 x 1g.18gb" in str(caught.value)
    assert f"partitioned nodes seen: {NODE}: mode time-slicing, not mig-single" in str(caught.value)


def test_with_a_driver_every_probe_is_performed_and_judged_from_the_tenants_logs(rig: Rig, drill_on: Any) -> None:
    """Time-slicing x 4 on one GPU: a greedy tenant fills the shared memory and every tenant's next working set
    fails; a contained and a reset-class Xid, injected by the profile's template, end every tenant on the GPU;
    each stands until the next probe starts (the last one until the rollback), which restores it first.  The
    tenants' promises hold: PASS.  The GPU's slices are judged from the Node's allocatable alone: the rig's
    kubelet (the reference agent) never hears of an Xid raised in the driver stand-in, so its 4 replicas stay
    allocatable, and that sentence FAILs naming them."""
    rig.enabled.touch()
    drill = drill_on("fdiso1")
    drill.use_cluster_node()
    assert drill.node == NODE and drill.layout is not None and drill.layout.mode == "time-slicing"
    assert drill.fill(4) == 4
    reports = drill.result.details["probe_reports"]
    assert all(r["allocator"] == "cuda-driver" and r["allocated_mib"] > 0 and r["gpu"] == 0
               for r in reports.values()), reports

    drill.run_probe("memory")
    memory = drill.last_probe
    assert memory is not None and memory["status"] == "done", memory
    assert all(o["state"] == "failed" and o["reason"].startswith("OutOfMemory") for o in memory["outcomes"].values()), memory
    assert 0 < memory["victim_allocated_mib"] <= 2048
    judged = drill.judge_last(EVERY_ON_GPU)
    assert judged is not None and judged.ok

    for key, xid in (("contained", 94), ("reset", 79)):
        drill.run_probe(key)
        column = drill.last_probe
        assert column is not None and column["status"] == "done", column["note"]
        assert column["injection"]["command"].split()[2:6] == [NODE, "0", "-", str(xid)]
        assert "1 node(s) (part-node)" in column["injection"]["blast_radius"]
        assert all(o["state"] == "failed" and "CUDA_ERROR_ECC_UNCORRECTABLE" in o["reason"]
                   for o in column["outcomes"].values()), column
        assert rig.fault.exists()  # the Xid stands while the sentences after its probe are judged
        judged = drill.judge_last(EVERY_ON_GPU)
        assert judged is not None and judged.ok
    assert drill.probes[1]["restored"] is True  # the contained fault's, before the reset-class probe
    assert rig.calls_made() == [f"inject {NODE} 0 - 94", f"restore {NODE} 0", f"inject {NODE} 0 - 79"]
    assert drill.result.verdict is Verdict.PASS, drill.result.findings

    drill.judge_slices(3.0)
    assert drill.result.verdict is Verdict.FAIL
    assert drill.result.findings == [
        f"GPU 0 of node {NODE} took a reset-class fault (Xid 79), yet 4 of its 4 slices were still allocatable 3 s "
        "later: 4 time-slicing replicas (nvidia.com/gpu)"]  # no tenant runs on: every one failed
    drill.rollback()
    drill.target.restore_all()
    assert rig.calls_made()[-1] == f"restore {NODE} 0" and not rig.fault.exists()


def test_without_a_driver_the_probes_are_inconclusive_and_nothing_is_injected(rig: Rig, drill_on: Any) -> None:
    """No driver library in the tenants' containers: they report it and idle; no probe can show anything, so each
    is INCONCLUSIVE naming what to install, and no Xid is injected."""
    drill = drill_on("fdiso2")
    drill.use_cluster_node()
    assert drill.fill(4) == 4
    assert all(r["allocator"] is None and "libcuda.so.1" in r["error"]
               for r in drill.result.details["probe_reports"].values())
    for key in ("memory", "contained"):
        drill.run_probe(key)
        column = drill.last_probe
        assert column is not None and column["status"] == "inconclusive"
        assert "holds no GPU memory" in column["note"] and "libcuda.so.1" in column["note"], column["note"]
        assert "injection" not in column
    assert rig.calls_made() == []
    assert drill.result.verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize(("profile", "says"), [
    ({"max_gpu_share": 0.1}, "not injected: refusing to pull 1 node(s) (part-node)"),
    ({"xid": False}, "set fault.xid.command_template in the target profile"),
])
def test_an_xid_the_profile_does_not_allow_is_never_injected(rig: Rig, drill_on: Any, profile: dict[str, Any],
                                                              says: str) -> None:
    """The Xid template runs only behind the node-fault safety checks, and only when the profile has one."""
    rig.enabled.touch()
    drill = drill_on("fdiso3", **profile)
    drill.use_cluster_node()
    assert drill.fill(4) == 4
    drill.run_probe("contained")
    column = drill.last_probe
    assert column is not None and column["status"] == "inconclusive" and says in column["note"], column["note"]
    assert rig.calls_made() == [] and not rig.fault.exists()
    assert drill.result.verdict is Verdict.INCONCLUSIVE
