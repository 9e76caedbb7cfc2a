"""Target fingerprint: what it keeps, what it never keeps, and a digest that only moves when the target does."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from drills.kube.fingerprint import SCHEMA, GpuModel, allowed_label, fingerprint
from drills.kube.flavors import GangFlavor

SECRETS = ["eyJhbGciOiJSUzI1NiJ9.secret-token", "s3cr3t-password", "AKIAIOSFODNN7EXAMPLE", "machine-0a1b2c",
           "boot-9f8e7d", "uuid-5566"]

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "gitCommit": "abc123", "gitTreeState": "clean",
           "buildDate": "2026-04-01T00:00:00Z", "goVersion": "go1.23.6", "compiler": "gc",
           "platform": "linux/amd64", "bearerToken": SECRETS[0]}


def node_info(**overrides: str) -> dict[str, str]:
    info = {"machineID": SECRETS[3], "systemUUID": SECRETS[5], "bootID": SECRETS[4], "kernelVersion": "6.1.0",
            "osImage": "Ubuntu 22.04.4 LTS", "containerRuntimeVersion": "containerd://1.7.20",
            "kubeletVersion": "v1.32.4", "kubeProxyVersion": "v1.32.4", "operatingSystem": "linux",
            "architecture": "amd64"}
    return {**info, **overrides}


def gpu_node(name: str, *, product: str = "NVIDIA-H100-80GB-HBM3", gpus: int = 8, allocatable: int | None = None,
             driver: tuple[str, str, str] = ("550", "54", "15"), extra_labels: dict[str, str] | None = None,
             **info: str) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver.major": driver[0], "nvidia.com/cuda.driver.minor": driver[1],
        "nvidia.com/cuda.driver.rev": driver[2],
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1754000000",
        "nvidia.com/mig.strategy": "single",
        **(extra_labels or {}),
    }
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "example.com/bmc-password": SECRETS[1],
                                     "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd.sock"}},
        "spec": {"providerID": "aws:///us-east-1a/i-0123", "podCIDR": "10.0.1.0/24"},
        "status": {"capacity": {"cpu": "192", "nvidia.com/gpu": str(gpus)},
                   "allocatable": {"cpu": "191", "nvidia.com/gpu": str(gpus if allocatable is None else allocatable)},
                   "addresses": [{"type": "InternalIP", "address": "10.0.1.7"}],
                   "nodeInfo": node_info(**info)},
    }


def cpu_node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/arch": "arm64",
                                                  "node-role.kubernetes.io/control-plane": ""}},
            "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}, "nodeInfo": node_info()}}


CRDS = {"batch.volcano.sh": ["v1alpha1"], "scheduling.volcano.sh": ["v1beta1"],
        "kueue.x-k8s.io": ["v1beta2", "v1beta1"]}


def cluster() -> list[dict[str, Any]]:
    return [gpu_node("gpu-0"), gpu_node("gpu-1", allocatable=7), gpu_node("a100-0", product="NVIDIA-A100-SXM4-80GB"),
            cpu_node("cp-0")]


def test_what_it_keeps() -> None:
    fp = fingerprint(VERSION, cluster(), CRDS)
    assert fp.server_version == "v1.32.4" and fp.node_count == 4
    assert fp.gpu_models == (GpuModel("NVIDIA-A100-SXM4-80GB", 1, 8, 8, 8),
                             GpuModel("NVIDIA-H100-80GB-HBM3", 2, 16, 16, 15))
    assert fp.gpu_capacity == 24 and fp.gpu_allocatable == 23
    assert fp.driver_versions == (("550.54.15", 3),)
    assert fp.cuda_runtime_versions == (("12.4", 3),)
    labels = dict(fp.labels)
    assert labels["nvidia.com/cuda.driver.major"] == (("550", 3),)
    assert labels["nvidia.com/gfd.timestamp"] == (("1754000000", 3),)
    assert labels["kubernetes.io/arch"] == (("amd64", 3), ("arm64", 1))
    assert "nvidia.com/gpu.product" not in labels  # summarised in gpu_models
    software = dict(fp.node_software)
    assert software["kubeletVersion"] == (("v1.32.4", 4),)
    assert set(software) == {"kubeletVersion", "containerRuntimeVersion", "kernelVersion", "osImage",
                             "architecture", "operatingSystem"}
    assert fp.crds == (("batch.volcano.sh", ("v1alpha1",)), ("kueue.x-k8s.io", ("v1beta1", "v1beta2")),
                       ("scheduling.volcano.sh", ("v1beta1",)))


def test_to_dict_is_canonical_json() -> None:
    doc = fingerprint(VERSION, cluster(), CRDS).to_dict()
    assert doc["schema"] == SCHEMA
    assert json.dumps(doc) == json.dumps(doc, sort_keys=True), "keys must be sorted at every level"
    assert doc["gpus"]["models"][1] == {"allocatable": 15, "capacity": 16, "labelled": 16, "nodes": 2,
                                        "product": "NVIDIA-H100-80GB-HBM3"}
    assert doc["server"] == {k: v for k, v in VERSION.items() if k != "bearerToken"}
    assert doc["crds"]["kueue.x-k8s.io"] == ["v1beta1", "v1beta2"]
    assert json.loads(fingerprint(VERSION, cluster(), CRDS).canonical_json()) == doc


def test_it_never_carries_secrets_or_identities() -> None:
    nodes = cluster()
    nodes[0]["metadata"]["labels"]["example.com/api-token"] = "tok-abcdef"
    nodes[0]["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] = "pre-installed"
    text = fingerprint(VERSION, nodes, CRDS).canonical_json().decode()
    for forbidden in [*SECRETS, "tok-abcdef", "api-token", "bmc-password", "gpu-0", "a100-0", "cp-0", "10.0.1.7",
                      "i-0123", "uid-gpu-0", "cri-socket", "control-plane", "kubeProxyVersion", "gpu.deploy"]:
        assert forbidden not in text, f"{forbidden!r} leaked into the fingerprint"


def test_digest_is_stable_under_reordering() -> None:
    base = fingerprint(VERSION, cluster(), CRDS)
    shuffled_nodes = cluster()
    random.Random(7).shuffle(shuffled_nodes)
    for n in shuffled_nodes:
        n["metadata"]["labels"] = dict(reversed(list(n["metadata"]["labels"].items())))
    shuffled_crds = {group: list(reversed(versions)) for group, versions in reversed(list(CRDS.items()))}
    again = fingerprint(dict(reversed(list(VERSION.items()))), shuffled_nodes, shuffled_crds)
    assert again == base and again.digest() == base.digest()
    assert len(base.digest()) == 64 and int(base.digest(), 16) >= 0


def test_digest_of_a_known_target_is_pinned() -> None:
    """Changing the canonical form changes every archived digest: bump SCHEMA and this value together."""
    fp = fingerprint({"gitVersion": "v1.32.0"}, [gpu_node("n")], {"scheduling.volcano.sh": ["v1beta1"]})
    assert fp.canonical_json().startswith(b'{"crds":{"scheduling.volcano.sh":["v1beta1"]},')
    assert fp.digest() == PINNED_DIGEST


PINNED_DIGEST = "844790df50a480189dc9dbe2b46596ce9cbdb7b51dbeff4f61988d92487b7469"


@pytest.mark.parametrize("change", ["driver", "node added", "gpu unhealthy", "crd version", "server"])
def test_digest_moves_when_the_target_does(change: str) -> None:
    nodes, crds, version = cluster(), copy.deepcopy(CRDS), dict(VERSION)
    before = fingerprint(version, nodes, crds).digest()
    if change == "driver":
        nodes[0] = gpu_node("gpu-0", driver=("560", "35", "03"))
    elif change == "node added":
        nodes.append(gpu_node("gpu-9"))
    elif change == "gpu unhealthy":
        nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "6"
    elif change == "crd version":
        crds["kueue.x-k8s.io"] = ["v1beta1"]
    else:
        version["gitVersion"] = "v1.33.0"
    assert fingerprint(version, nodes, crds).digest() != before


def test_node_names_and_annotations_do_not_move_the_digest() -> None:
    renamed = cluster()
    for i, n in enumerate(renamed):
        n["metadata"]["name"] = f"renamed-{i}"
        n["metadata"]["annotations"] = {"anything": "else"}
    assert fingerprint(VERSION, renamed, CRDS).digest() == fingerprint(VERSION, cluster(), CRDS).digest()


def test_gpu_nodes_without_gfd_labels_and_odd_quantities() -> None:
    bare = {"metadata": {"name": "x"}, "status": {"capacity": {"nvidia.com/gpu": "4"},
                                                  "allocatable": {"nvidia.com/gpu": "4"}}}
    odd = gpu_node("y", gpus=2)
    odd["metadata"]["labels"]["nvidia.com/gpu.count"] = "two"
    odd["status"]["allocatable"]["nvidia.com/gpu"] = "1k"
    plugin_down = gpu_node("z")
    del plugin_down["status"]["capacity"]["nvidia.com/gpu"]
    del plugin_down["status"]["allocatable"]["nvidia.com/gpu"]
    fp = fingerprint({}, [bare, odd, plugin_down], {})
    assert fp.gpu_models == (GpuModel("NVIDIA-H100-80GB-HBM3", 2, 8, 2, 0), GpuModel("unknown", 1, 0, 4, 4))
    assert fp.server_version == "" and fp.crds == ()


def test_new_style_gfd_version_labels() -> None:
    node = gpu_node("n", extra_labels={"nvidia.com/cuda.driver-version.full": "570.86.15",
                                       "nvidia.com/cuda.runtime-version.full": "12.8",
                                       "nvidia.com/device-plugin.version": "v0.17.0"})
    fp = fingerprint({}, [node], {})
    assert fp.driver_versions == (("570.86.15", 1),) and fp.cuda_runtime_versions == (("12.8", 1),)
    assert dict(fp.labels)["nvidia.com/device-plugin.version"] == (("v0.17.0", 1),)


@pytest.mark.parametrize(("key", "kept"), [
    ("nvidia.com/cuda.driver.major", True),
    ("nvidia.com/gfd.timestamp", True),
    ("nvidia.com/cuda.driver-version.full", True),
    ("nvidia.com/device-plugin.version", True),
    ("nvidia.com/gpu.product", False),
    ("nvidia.com/gpu.deploy.driver", False),
    ("example.com/driver.version", False),
    ("example.com/api-token", False),
    ("kubernetes.io/hostname", False),
    ("node.kubernetes.io/instance-type", True),
])
def test_allowed_label(key: str, kept: bool) -> None:
    assert allowed_label(key) is kept


def test_flavors_served() -> None:
    assert fingerprint({}, [], CRDS).flavors_served() == (GangFlavor.VOLCANO, GangFlavor.KUEUE)
    assert fingerprint({}, [], {"scheduling.run.ai": ["v2alpha2"]}).flavors_served() == ()
    assert fingerprint({}, [], {"scheduling.run.ai": ["v2", "v2alpha2"]}).flavors_served() == (GangFlavor.KAI,)
    assert fingerprint({}, [], {"kueue.x-k8s.io": "v1beta2"}).crds == (("kueue.x-k8s.io", ("v1beta2",)),)


def test_fingerprint_is_frozen() -> None:
    fp = fingerprint(VERSION, cluster(), CRDS)
    with pytest.raises(AttributeError):
        fp.node_count = 1  # type: ignore[misc]
    hash(fp)
