"""The isolation probe for real clusters: a small program a tenant pod runs to see its GPU slice.

On a real cluster the partition isolation drill cannot look inside a GPU; each
probe tenant runs this program (``python3 -c <source>`` in any image with
Python and ``nvidia-ml-py``) which reports, as one JSON line, what NVML shows
it: the devices visible to it, their names and memory, MIG mode, and the
memory it then manages to allocate with whatever array library the image has
(CuPy, then PyTorch).  The drill reads the line from the pod's log.

The program is this module's :func:`main`, shipped as source text, so it is
tested here exactly as it runs there.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from typing import Any

MARKER = "FIREDRILL-PROBE "


def main(argv: list[str]) -> int:  # runs inside the probe pod: standard library + pynvml only
    import json as _json

    allocate_mib = int(argv[1]) if len(argv) > 1 else 0
    report: dict = {"ok": False, "devices": [], "allocated_mib": 0, "allocator": None, "error": None}
    try:
        import pynvml
    except ImportError:
        report["error"] = "nvidia-ml-py (pynvml) is not installed in the probe image"
        print("FIREDRILL-PROBE " + _json.dumps(report), flush=True)
        return 3
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        report["error"] = f"NVML unavailable: {exc}"
        print("FIREDRILL-PROBE " + _json.dumps(report), flush=True)
        return 3
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                mig = pynvml.nvmlDeviceGetMigMode(handle)[0]
            except pynvml.NVMLError:
                mig = None
            report["devices"].append({"index": i, "name": name if isinstance(name, str) else name.decode(),
                                      "memory_total_mib": memory.total // 2**20,
                                      "memory_used_mib": memory.used // 2**20, "mig_mode": mig})
        report["ok"] = True
    except pynvml.NVMLError as exc:
        report["error"] = f"NVML query failed: {exc}"
    finally:
        pynvml.nvmlShutdown()
    if allocate_mib and report["ok"]:
        held = None
        try:
            import cupy
            held = cupy.zeros(allocate_mib * 2**20, dtype=cupy.uint8)
            report["allocator"] = "cupy"
        except Exception as exc:  # noqa: BLE001 - any failure is the answer we report
            try:
                import torch
                held = torch.zeros(allocate_mib * 2**20, dtype=torch.uint8, device="cuda")
                report["allocator"] = "torch"
            except Exception as exc2:  # noqa: BLE001
                report["error"] = f"could not allocate {allocate_mib} MiB: cupy: {exc}; torch: {exc2}"
        if held is not None:
            report["allocated_mib"] = allocate_mib
    print("FIREDRILL-PROBE " + _json.dumps(report), flush=True)
    return 0 if report["ok"] and not report["error"] else 3


def program_source() -> str:
    """The probe as a standalone program for ``python3 -c``."""
    return inspect.getsource(main) + "\nimport sys\nsys.exit(main(sys.argv))\n"


def probe_pod(name: str, namespace: str, image: str, resource: str, allocate_mib: int = 0,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod holding one slice (``resource``) that runs the probe once and exits."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "probe", "image": image,
                "command": ["python3", "-c", program_source(), str(allocate_mib)],
                "resources": {"limits": {resource: "1"}}}]}}


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    devices: tuple[dict[str, Any], ...]
    allocated_mib: int
    allocator: str | None
    error: str | None


def parse_probe_output(log: str) -> ProbeResult | None:
    """The probe's report from a pod log, or None when the log holds none (the probe never ran)."""
    for line in reversed(log.splitlines()):
        if line.startswith(MARKER):
            data = json.loads(line[len(MARKER):])
            return ProbeResult(bool(data.get("ok")), tuple(data.get("devices") or ()),
                               int(data.get("allocated_mib") or 0), data.get("allocator"), data.get("error"))
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
