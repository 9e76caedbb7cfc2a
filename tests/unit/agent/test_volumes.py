"""Pod volumes: their directories, mounts, and paths rewritten into them."""

from __future__ import annotations

from pathlib import Path

import pytest

from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.volumes import Mount, NodeDirs, VolumeKind, container_mounts, pod_volumes, rewrite
from refplatform.defects import Defect

DATA = Path("/data")


def pod(*volumes: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "p", "uid": "uid-1"}, "spec": {"volumes": list(volumes)}}


def test_each_volume_type_maps_to_its_directory() -> None:
    dirs = NodeDirs(DATA, "gpu-node-0")
    vols, problems = pod_volumes(pod(
        {"name": "scratch", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/var/lib/x"}},
        {"name": "ckpt", "nfs": {"server": "nfs.example", "path": "/exports/ckpt"}},
    ), dirs)
    assert problems == {}
    assert vols["scratch"].kind is VolumeKind.EMPTY_DIR
    assert vols["scratch"].directory == DATA / "nodes/gpu-node-0/pods/uid-1/volumes/scratch"
    assert vols["host"].directory == DATA / "nodes/gpu-node-0/host/var/lib/x"
    assert vols["ckpt"].directory == DATA / "nfs/nfs.example/exports/ckpt"


def test_nfs_is_shared_by_nodes_unless_the_lose_checkpoint_defect_makes_it_per_node() -> None:
    spec = pod({"name": "ckpt", "nfs": {"server": "10.0.0.5", "path": "/ckpt"}})
    a = pod_volumes(spec, NodeDirs(DATA, "gpu-node-0"))[0]["ckpt"].directory
    b = pod_volumes(spec, NodeDirs(DATA, "gpu-node-1"))[0]["ckpt"].directory
    assert a == b == DATA / "nfs/10.0.0.5/ckpt"
    lost = [pod_volumes(spec, NodeDirs(DATA, n, frozenset({Defect.LOSE_CHECKPOINT})))[0]["ckpt"].directory
            for n in ("gpu-node-0", "gpu-node-1")]
    assert lost == [DATA / "nodes/gpu-node-0/nfs/10.0.0.5/ckpt", DATA / "nodes/gpu-node-1/nfs/10.0.0.5/ckpt"]


def test_paths_cannot_climb_out_of_their_root() -> None:
    dirs = NodeDirs(DATA, "n")
    vols, _ = pod_volumes(pod({"name": "h", "hostPath": {"path": "/../../etc"}},
                              {"name": "f", "nfs": {"server": "s", "path": "/a/../../../b"}}), dirs)
    assert vols["h"].directory == DATA / "nodes/n/host/etc"
    assert vols["f"].directory == DATA / "nfs/s/b"
    _, problems = pod_volumes(pod({"name": "bad", "nfs": {"server": "../x", "path": "/p"}}), dirs)
    assert "spec.volumes[0].nfs.server" in problems["bad"]


def test_mounts_are_longest_first_and_rewrite_whole_values_only() -> None:
    dirs = NodeDirs(DATA, "n")
    vols, problems = pod_volumes(pod({"name": "a", "emptyDir": {}}, {"name": "b", "nfs": {"server": "s", "path": "/b"}}),
                                 dirs)
    mounts = container_mounts({"volumeMounts": [{"name": "a", "mountPath": "/work"},
                                                {"name": "b", "mountPath": "/work/ckpt/", "subPath": "run-1"}]},
                              "spec.containers[0]", vols, problems)
    assert [m.mount_path for m in mounts] == ["/work/ckpt", "/work"]
    a_dir, b_dir = str(vols["a"].directory), str(vols["b"].directory)
    assert rewrite("/work", mounts) == a_dir
    assert rewrite("/work/x/y", mounts) == a_dir + "/x/y"
    assert rewrite("/work/ckpt", mounts) == b_dir + "/run-1"
    assert rewrite("/work/ckpt/f.json", mounts) == b_dir + "/run-1/f.json"
    assert rewrite("/workspace", mounts) == "/workspace"          # a sibling, not under the mount
    assert rewrite("--dir=/work", mounts) == "--dir=/work"          # only whole values
    assert rewrite("relative/work", mounts) == "relative/work"


@pytest.mark.parametrize(("mount", "message"), [
    ({"name": "nope", "mountPath": "/x"}, "spec.containers[0].volumeMounts[0].name: no volume named 'nope'"),
    ({"name": "a", "mountPath": "x"}, "spec.containers[0].volumeMounts[0].mountPath: must be an absolute path"),
    ({"name": "a", "mountPath": "/"}, "spec.containers[0].volumeMounts[0].mountPath: / cannot be mounted"),
    ({"name": "cm", "mountPath": "/cfg"}, "spec.volumes[1]: volume type persistentVolumeClaim is not supported"),
    ({"name": "a", "mountPath": "/x", "subPath": "../up"}, "spec.containers[0].volumeMounts[0].subPath"),
])
def test_bad_mounts_name_their_field(mount: dict[str, object], message: str) -> None:
    vols, problems = pod_volumes(pod({"name": "a", "emptyDir": {}},
                                     {"name": "cm", "persistentVolumeClaim": {"claimName": "c"}}),
                                 NodeDirs(DATA, "n"))
    with pytest.raises(ContainerSpecError) as err:
        container_mounts({"volumeMounts": [mount]}, "spec.containers[0]", vols, problems)
    assert str(err.value).startswith(message)


def test_an_unmounted_unsupported_volume_is_ignored() -> None:
    vols, problems = pod_volumes(pod({"name": "cm", "persistentVolumeClaim": {"claimName": "c"}}), NodeDirs(DATA, "n"))
    assert vols == {} and "cm" in problems
    assert container_mounts({}, "spec.containers[0]", vols, problems) == []


def test_prepare_creates_and_remove_pod_deletes_the_pods_files(tmp_path: Path) -> None:
    dirs = NodeDirs(tmp_path, "n")
    vols, _ = pod_volumes(pod({"name": "scratch", "emptyDir": {}}, {"name": "ckpt", "nfs": {"server": "s", "path": "/c"}}),
                          dirs)
    dirs.prepare(vols.values())
    (vols["scratch"].directory / "f").write_text("x")
    (vols["ckpt"].directory / "g").write_text("y")
    assert dirs.pod_uids() == ["uid-1"]
    dirs.remove_pod("uid-1")
    assert not vols["scratch"].directory.exists() and dirs.pod_uids() == []
    assert (vols["ckpt"].directory / "g").read_text() == "y"  # shared storage outlives the pod


def test_a_mount_is_a_plain_value() -> None:
    assert rewrite("/m", [Mount("/m", Path("/d"))]) == "/d"
