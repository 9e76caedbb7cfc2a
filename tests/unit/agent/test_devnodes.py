"""A container is given only its own GPUs, as the device plugin and the container toolkit give them: the variable
it is told and the device nodes it can open (``refplatform.agent.devnodes``); with ``visible-to-all`` every GPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from refplatform.agent.devnodes import ContainerDevices, DeviceGrant, container_devices, write_device_dir
from refplatform.defects import Defect
from refplatform.gpu.identity import gpu_uuid
from tests.unit.agent.test_runtime import NODE, Env, python

GPU = "nvidia.com/gpu"
NODE_GPUS = [DeviceGrant(g, f"GPU-{g}", GPU) for g in range(4)]


def container(name: str, **limits: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": dict(limits)}} if limits else {"name": name}


def test_the_pods_gpus_are_shared_out_in_container_order_and_a_container_without_a_request_gets_none() -> None:
    pod = {"spec": {"containers": [container("a", **{GPU: "1"}), container("side"), container("b", **{GPU: "2"})]}}
    granted = [DeviceGrant(g, f"GPU-{g}", GPU) for g in (5, 6, 7)]
    given = container_devices(pod, granted, NODE_GPUS)
    assert given["a"] == ContainerDevices("GPU-5", (granted[0],))
    assert given["side"] == ContainerDevices(None, ())
    assert given["b"] == ContainerDevices("GPU-6,GPU-7", tuple(granted[1:]))
    assert container_devices(pod, None, NODE_GPUS)["a"] == ContainerDevices(None, ())


def test_a_slice_goes_to_the_container_that_requests_its_resource() -> None:
    mig = "nvidia.com/mig-1g.18gb"
    pod = {"spec": {"containers": [container("side"), container("tenant", **{mig: "1"})]}}
    grant = DeviceGrant(0, "MIG-0-3", mig)
    given = container_devices(pod, [grant], NODE_GPUS)
    assert given["tenant"] == ContainerDevices("MIG-0-3", (grant,)) and given["side"].nodes == ()


def test_visible_to_all_gives_every_container_every_gpu_and_tells_one_without_a_request_all() -> None:
    pod = {"spec": {"containers": [container("gpu", **{GPU: "1"}), container("side")]}}
    given = container_devices(pod, [NODE_GPUS[2]], NODE_GPUS, visible_to_all=True)
    assert given["gpu"] == ContainerDevices("GPU-2", tuple(NODE_GPUS))
    assert given["side"] == ContainerDevices("all", tuple(NODE_GPUS))


def test_the_device_directory_holds_exactly_the_given_nodes_each_naming_its_gpu(tmp_path: Path) -> None:
    d = tmp_path / "dev"
    d.mkdir()
    (d / "nvidia9").write_text("stale")
    two_slices = ContainerDevices("MIG-0-1,MIG-0-2", (DeviceGrant(0, "MIG-0-1", "m"), DeviceGrant(0, "MIG-0-2", "m"),
                                                      DeviceGrant(3, "GPU-3", GPU)))
    write_device_dir(d, two_slices)
    assert sorted(os.listdir(d)) == ["nvidia0", "nvidia3"]
    assert (d / "nvidia0").read_text() == "MIG-0-1\n" and (d / "nvidia3").read_text() == "GPU-3\n"


SHOW = ("import os; d = os.environ['FIREDRILL_DEVICE_DIR']; "
        "print(os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>'), "
        "' '.join(f'{n}={open(os.path.join(d, n)).read().strip()}' for n in sorted(os.listdir(d))) or '-', "
        "flush=True)")


@pytest.mark.parametrize("defects", [frozenset(), frozenset({Defect.VISIBLE_TO_ALL})])
def test_a_container_process_opens_only_its_own_gpus_device_nodes(tmp_path: Path, defects: frozenset[Defect]) -> None:
    env = Env(tmp_path, defects)
    try:
        env.add_pod("pod", [python(SHOW, name="gpu", resources={"limits": {GPU: "2"}}),
                            python(SHOW, name="side", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
                            python(SHOW, name="plain")], annotations={"firedrill.dev/gpu-index": "4,5"})
        env.until(lambda: all(env.log("pod", c) for c in ("gpu", "side", "plain")), "every container's line")
        own = f"{gpu_uuid(NODE, 4)},{gpu_uuid(NODE, 5)}"
        every = " ".join(f"nvidia{g}={gpu_uuid(NODE, g)}" for g in range(8))
        if defects:
            assert env.log("pod", "gpu") == [f"{own} {every}"]
            assert env.log("pod", "side") == [f"all {every}"] and env.log("pod", "plain") == [f"all {every}"]
        else:
            assert env.log("pod", "gpu") == [f"{own} nvidia4={gpu_uuid(NODE, 4)} nvidia5={gpu_uuid(NODE, 5)}"]
            # the image's NVIDIA_VISIBLE_DEVICES=all reaches nothing: no device node
            assert env.log("pod", "side") == ["all -"] and env.log("pod", "plain") == ["<unset> -"]
    finally:
        env.close()
