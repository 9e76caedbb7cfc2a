"""A hang and storage-stall injector for a target profile's ``fault.hang`` and ``fault.storage_stall`` on the real-cluster tests: a site's injector, here for the
refplatform agents that serve as kubelets (each applies a ``{"gpu", "hang": true}`` entry of its Node's
``firedrill.dev/inject-throttle`` as its GPU's driver would: SIGUSR2 to the processes holding that GPU, which the
canary takes as its GPU stuck in a kernel; and a ``{"storage_stall_until"}`` entry as its volume layer would: the
checkpoint storage stops answering until then; docs/HANG.md).

    python tests/realk8s/hangctl.py hang KUBECONFIG NODE UUID      stop the rank on the GPU with that UUID
    python tests/realk8s/hangctl.py stall KUBECONFIG NODE SECONDS  the node's checkpoint storage stops answering
                                                                   for SECONDS (the entry expires by itself)
    python tests/realk8s/hangctl.py clear KUBECONFIG NODE          remove the node's entries

The GPU is aimed by its UUID (what the rank's canary logged), mapped to its index the way the simulated GPUs
derive their identities; only Nodes of the test's own cluster are ever touched, through its admin kubeconfig.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from refplatform.gpu.identity import gpu_uuid

ANNOTATION = "firedrill.dev/inject-throttle"
MAX_GPUS = 64


def kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True, capture_output=True, text=True,
                   timeout=30)


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "hang":
        _, kubeconfig, node, uuid = argv
        index = next((i for i in range(MAX_GPUS) if gpu_uuid(node, i) == uuid), None)
        if index is None:
            print(f"hangctl: no GPU of node {node} has UUID {uuid}", file=sys.stderr)
            return 1
        entry = {"id": f"hangctl-{index}-{time.time_ns()}", "gpu": index, "hang": True}
        kubectl(kubeconfig, "annotate", "node", node, "--overwrite", f"{ANNOTATION}={json.dumps([entry])}")
        print(f"hangctl: the processes on GPU {index} ({uuid}) of node {node} hung")
        return 0
    if len(argv) == 4 and argv[0] == "stall":
        _, kubeconfig, node, seconds = argv
        entry = {"id": f"hangctl-stall-{time.time_ns()}", "storage_stall_until": round(time.time() + float(seconds), 3)}
        kubectl(kubeconfig, "annotate", "node", node, "--overwrite", f"{ANNOTATION}={json.dumps([entry])}")
        print(f"hangctl: the checkpoint storage of node {node} stalled for {seconds} s")
        return 0
    if len(argv) == 3 and argv[0] == "clear":
        _, kubeconfig, node = argv
        kubectl(kubeconfig, "annotate", "node", node, f"{ANNOTATION}-")
        print(f"hangctl: node {node}'s entries removed")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
