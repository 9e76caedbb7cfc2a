"""The isolation probe: the program every tenant pod of the partition isolation drill runs on a real cluster.

On a real cluster the drill cannot look inside a GPU, so the tenant program
*is* the probe.  Each tenant pod runs this program (``python3 -c <source>``;
standard library only, so the canary image, or any image with ``python3``,
will do), and it reports through its pod log, one line per event, each
``FIREDRILL-PROBE {json}``.  The harness reads those lines through the API
(``pods/log``).

What it uses is what the NVIDIA container runtime puts into every container
that holds a GPU: ``libnvidia-ml.so.1`` (NVML, the ``utility`` driver
capability) to see its slice, and ``libcuda.so.1`` (the CUDA driver API, the
``compute`` capability) to allocate and touch GPU memory, both through
``ctypes``.  NVML cannot allocate memory, and CuPy and PyTorch both sit on
``libcuda.so.1``, so where that library is missing no array library could
allocate either; calling it directly needs nothing installed in the image.
The tenant pod asks for both capabilities (``NVIDIA_DRIVER_CAPABILITIES=
compute,utility``).

Modes (the arguments after the program):

- ``report [MIB]``: report the slice as NVML shows it, allocate ``MIB`` once,
  print one ``report`` line and exit (0 when everything worked, 3 otherwise).
- ``tenant --hold MIB --scratch MIB --period S``: an idle tenant.  It reports
  its slice, holds ``--hold`` MiB (so it owns a CUDA context a GPU fault can
  reach), prints ``ready``, then every ``--period`` seconds writes its held
  memory, synchronizes, and allocates, writes and frees a ``--scratch`` MiB
  working set, as a training step's allocator does.  A CUDA error there ends
  it: a ``failed`` line (reason ``OutOfMemory`` or ``CudaError``), then it
  keeps its memory for ``--linger`` seconds and exits 1 (so the outcome does
  not depend on which failed tenant's exit frees memory first).
  Where no GPU memory can be allocated at all (no driver library, no device),
  ``ready`` says so in ``error`` and the tenant idles: it can then prove
  nothing, and the drill says so (INCONCLUSIVE), naming what to install.
- ``tenant --greedy LIMIT --share MIB --linger S ...``: the memory probe's
  victim.  It allocates in chunks until it holds ``LIMIT`` MiB (the whole
  GPU's memory) or the driver refuses (out of memory).  Refused, it prints
  ``failed`` (reason ``OutOfMemory``, with what it got against its share),
  keeps what it got for ``--linger`` seconds and takes whatever is freed
  meanwhile (as a leaking process does), so its neighbours' working sets
  (one every ``--period``, several within the linger) meet a full GPU where
  memory is shared, then exits 1.  Where memory is
  isolated (MIG, a software cap) only the victim fails; where it is shared
  (time-slicing) its neighbours' next allocations fail too.

The program is the source of this module's functions (:func:`program_source`),
so the tests run exactly what a pod runs.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "ALLOCATOR",
    "DRIVER_CAPABILITIES",
    "MARKER",
    "ProbeEvent",
    "ProbeReport",
    "ProbeResult",
    "parse_probe_line",
    "parse_probe_lines",
    "parse_probe_output",
    "probe_fields",
    "probe_pod",
    "program_source",
    "tenant_args",
]

MARKER = "FIREDRILL-PROBE "
ALLOCATOR = "cuda-driver"
"""The allocator the probe names in its reports: the CUDA driver API (``libcuda.so.1``) through ctypes."""
DRIVER_CAPABILITIES = "compute,utility"
"""What a tenant pod asks the NVIDIA container runtime for: libcuda (compute) and NVML (utility)."""


# ------------------------------------------------------------------ the program (runs inside the pod)
# Everything from here to program_source() is shipped as source text: standard library only, no names from
# outside these functions.


def _emit(event: str, fields: dict) -> None:  # pragma: no cover - exercised through subprocesses
    import json as _json

    print("FIREDRILL-PROBE " + _json.dumps({"event": event, **fields}, sort_keys=True), flush=True)


def _nvml_devices() -> tuple:  # pragma: no cover - exercised through subprocesses
    """(devices, error): what NVML (libnvidia-ml.so.1) shows this container."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return [], f"NVML unavailable: libnvidia-ml.so.1 cannot be loaded ({exc})"
    nvml.nvmlErrorString.restype = ctypes.c_char_p

    def err(rc: int) -> str:
        text = nvml.nvmlErrorString(rc)
        return f"{text.decode() if text else 'error'} ({rc})"

    rc = nvml.nvmlInit_v2()
    if rc != 0:
        return [], f"NVML unavailable: nvmlInit failed: {err(rc)}"

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def text(fn: Any, handle: Any) -> str:
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode() if fn(handle, buf, ctypes.c_uint(96)) == 0 else ""

    def number(fn: Any, handle: Any) -> Any:
        value = ctypes.c_uint(0)
        return value.value if fn(handle, ctypes.byref(value)) == 0 else None

    def memory(handle: Any) -> int | None:
        mem = Memory()
        return mem.total // 2**20 if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0 else None

    devices: list = []
    try:
        count = ctypes.c_uint(0)
        rc = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if rc != 0:
            return [], f"NVML query failed: nvmlDeviceGetCount: {err(rc)}"
        for i in range(count.value):
            handle = ctypes.c_void_p()
            rc = nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle))
            if rc != 0:
                return devices, f"NVML query failed: nvmlDeviceGetHandleByIndex({i}): {err(rc)}"
            current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
            mig = (current.value if nvml.nvmlDeviceGetMigMode(handle, ctypes.byref(current),
                                                              ctypes.byref(pending)) == 0 else None)
            device = {"index": i, "name": text(nvml.nvmlDeviceGetName, handle),
                      "uuid": text(nvml.nvmlDeviceGetUUID, handle),
                      "minor": number(nvml.nvmlDeviceGetMinorNumber, handle),
                      "memory_total_mib": memory(handle), "mig_mode": mig, "mig_devices": []}
            if mig == 1:
                most = number(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
                for j in range(most):
                    mig_handle = ctypes.c_void_p()
                    if nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, ctypes.c_uint(j),
                                                                ctypes.byref(mig_handle)) != 0:
                        continue  # not there, or not this container's
                    device["mig_devices"].append({
                        "uuid": text(nvml.nvmlDeviceGetUUID, mig_handle),
                        "gpu_instance": number(nvml.nvmlDeviceGetGpuInstanceId, mig_handle),
                        "compute_instance": number(nvml.nvmlDeviceGetComputeInstanceId, mig_handle),
                        "memory_total_mib": memory(mig_handle)})
            devices.append(device)
    finally:
        nvml.nvmlShutdown()
    return devices, None


class _Cuda:  # pragma: no cover - exercised through subprocesses
    """GPU memory through the CUDA driver API (libcuda.so.1), on the container's first CUDA device."""

    OUT_OF_MEMORY = 2

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")  # OSError: no driver library in this container
        self.check(self.lib.cuInit(0), "cuInit")
        device = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet(0)")
        self.context = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def name(self, rc: int) -> str:
        text = self.ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, self.ctypes.byref(text)) == 0 and text.value:
            return f"{text.value.decode()} ({rc})"
        return f"CUDA error {rc}"

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise _CudaError(rc, f"{what}: {self.name(rc)}")

    def alloc(self, mib: int) -> int:
        """A device pointer to ``mib`` MiB, written once; raises _CudaError (rc 2: out of memory)."""
        pointer = self.ctypes.c_ulonglong(0)
        size = self.ctypes.c_size_t(mib * 2**20)
        self.check(self.lib.cuMemAlloc_v2(self.ctypes.byref(pointer), size), f"cuMemAlloc({mib} MiB)")
        try:
            self.touch(pointer.value, mib)
        except _CudaError:
            self.lib.cuMemFree_v2(self.ctypes.c_ulonglong(pointer.value))
            raise
        return pointer.value

    def touch(self, pointer: int, mib: int, value: int = 0x5A) -> None:
        """Write every byte and wait for the GPU: the work a fault on this GPU or slice interrupts."""
        size = self.ctypes.c_size_t(mib * 2**20)
        self.check(self.lib.cuMemsetD8_v2(self.ctypes.c_ulonglong(pointer), self.ctypes.c_ubyte(value), size),
                   "cuMemsetD8")
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def free(self, pointer: int) -> None:
        self.check(self.lib.cuMemFree_v2(self.ctypes.c_ulonglong(pointer)), "cuMemFree")


class _CudaError(Exception):  # pragma: no cover - exercised through subprocesses
    def __init__(self, rc: int, message: str) -> None:
        super().__init__(message)
        self.rc = rc


def main(argv: list) -> int:  # pragma: no cover - exercised through subprocesses
    import argparse
    import time

    if len(argv) > 1 and argv[1].isdigit():  # ``<program> MIB``: report mode
        argv = [argv[0], "report", argv[1]]
    parser = argparse.ArgumentParser(prog="firedrill-probe")
    modes = parser.add_subparsers(dest="mode", required=True)
    once = modes.add_parser("report")
    once.add_argument("allocate", type=int, nargs="?", default=0)
    tenant = modes.add_parser("tenant")
    tenant.add_argument("--hold", type=int, default=256, help="MiB held for the tenant's life")
    tenant.add_argument("--scratch", type=int, default=64, help="MiB allocated and freed every period")
    tenant.add_argument("--period", type=float, default=0.5)
    tenant.add_argument("--greedy", type=int, default=0, help="allocate up to this many MiB (the memory probe)")
    tenant.add_argument("--share", type=int, default=0, help="the tenant's memory share in MiB (for the report)")
    tenant.add_argument("--linger", type=float, default=5.0, help="seconds a failed tenant holds its memory")
    tenant.add_argument("--chunk", type=int, default=256, help="MiB per greedy allocation")
    args = parser.parse_args(argv[1:])

    devices, error = _nvml_devices()
    base = {"devices": devices, "allocator": None, "allocated_mib": 0, "error": error}
    try:
        cuda = _Cuda()
    except OSError as exc:
        cuda, cuda_error = None, f"the CUDA driver library libcuda.so.1 cannot be loaded ({exc})"
    except _CudaError as exc:
        cuda, cuda_error = None, f"CUDA unavailable: {exc}"
    else:
        cuda_error = None
        base["allocator"] = "cuda-driver"
    if args.mode == "report":
        ok = error is None
        if args.allocate and cuda is None:
            base["error"], ok = "; ".join(e for e in (error, cuda_error) if e), False
        elif args.allocate and cuda is not None:
            try:
                cuda.free(cuda.alloc(args.allocate))
                base["allocated_mib"] = args.allocate
            except _CudaError as exc:
                base["error"], ok = f"could not allocate {args.allocate} MiB: {exc}", False
        _emit("report", {**base, "ok": ok})
        return 0 if ok else 3
    if cuda is None:  # nothing this tenant does can show isolation; say so, and idle until stopped
        _emit("ready", {**base, "ok": False, "error": "; ".join(e for e in (error, cuda_error) if e)})
        while True:
            time.sleep(3600)
    held: list = []
    size = 0
    target = args.greedy or args.hold
    chunk = args.chunk if args.greedy else max(target, 1)
    try:
        while size < target:
            step = min(chunk, target - size)
            held.append((cuda.alloc(step), step))
            size += step
    except _CudaError as exc:
        reason = "OutOfMemory" if exc.rc == _Cuda.OUT_OF_MEMORY else "CudaError"
        _emit("failed", {**base, "ok": False, "reason": reason, "error": str(exc), "allocated_mib": size,
                         "wanted_mib": target, "share_mib": args.share})
        # Hold what it got and keep taking whatever is freed, as a leaking process does: where memory is shared,
        # a neighbour that frees its working set cannot get it back, so its next allocation fails (without
        # this, a neighbour whose working set was in flight at this instant could cycle it for ever)
        until = time.monotonic() + args.linger
        piece = chunk
        while time.monotonic() < until:
            try:
                held.append((cuda.alloc(piece), piece))
            except _CudaError:
                piece = max(1, piece // 2) if piece > 1 else chunk
                time.sleep(0.002)
        return 1
    _emit("ready", {**base, "ok": error is None, "allocated_mib": size, "share_mib": args.share})
    beat = 0
    while True:
        time.sleep(args.period)
        beat += 1
        try:
            for pointer, mib in held:
                cuda.touch(pointer, mib, beat % 256)
            if args.scratch:
                cuda.free(cuda.alloc(args.scratch))
        except _CudaError as exc:
            reason = "OutOfMemory" if exc.rc == _Cuda.OUT_OF_MEMORY else "CudaError"
            _emit("failed", {**base, "ok": False, "reason": reason, "error": str(exc), "allocated_mib": size,
                             "beat": beat, "share_mib": args.share})
            time.sleep(args.linger)
            return 1


_PROGRAM = (_emit, _nvml_devices, _Cuda, _CudaError, main)


def program_source() -> str:
    """The probe as a standalone program for ``python3 -c`` (``sys.argv[0]`` is ``-c``)."""
    parts = ["from __future__ import annotations\n\nfrom typing import Any\n"] + [
        inspect.getsource(part) for part in _PROGRAM]
    return "\n\n".join(parts) + "\nimport sys\nsys.exit(main(sys.argv))\n"


# ------------------------------------------------------------------------ the harness's side


def tenant_args(*, hold_mib: int = 256, scratch_mib: int = 64, period: float = 0.5, greedy_mib: int = 0,
                share_mib: int = 0, linger: float = 5.0, chunk_mib: int = 256) -> list[str]:
    """The probe's arguments for a tenant (and, with ``greedy_mib``, for the memory probe's victim)."""
    args = ["tenant", "--hold", str(hold_mib), "--scratch", str(scratch_mib), "--period", f"{period:g}",
            "--share", str(share_mib), "--linger", f"{linger:g}"]
    if greedy_mib:
        args += ["--greedy", str(greedy_mib), "--chunk", str(chunk_mib)]
    return args


def probe_pod(name: str, namespace: str, image: str, resource: str, allocate_mib: int = 0,
              labels: dict[str, str] | None = None, args: list[str] | None = None,
              limits: dict[str, str] | None = None, node: str | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod holding one slice (``resource``, plus any extra ``limits``) that runs the probe: once
    (``report allocate_mib``) unless ``args`` says otherwise (:func:`tenant_args`)."""
    wanted = {resource: "1", **(limits or {})}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{
        "name": "probe", "image": image,
        "command": ["python3", "-c", program_source(), *(args or ["report", str(allocate_mib)])],
        "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": DRIVER_CAPABILITIES},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"limits": dict(wanted), "requests": dict(wanted)}}]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec}


class ProbeEvent(Enum):
    """What a probe line says."""

    REPORT = "report"
    """Report mode: the slice, and whether the one allocation worked."""
    READY = "ready"
    """A tenant holds its memory and runs (``allocator`` None and an ``error``: it could allocate nothing)."""
    FAILED = "failed"
    """A tenant's GPU work failed (``reason``: OutOfMemory or CudaError); it exits 1."""


@dataclass(frozen=True)
class ProbeReport:
    """One ``FIREDRILL-PROBE`` line."""

    event: ProbeEvent
    ok: bool
    devices: tuple[dict[str, Any], ...]
    allocated_mib: int
    allocator: str | None
    error: str | None
    reason: str | None = None
    """``failed`` lines: OutOfMemory or CudaError."""
    share_mib: int = 0
    wanted_mib: int = 0

    @property
    def holds_gpu_memory(self) -> bool:
        """The tenant owns a CUDA context with memory: a fault on its GPU or slice can reach it."""
        return self.event is ProbeEvent.READY and self.allocator is not None and self.allocated_mib > 0

    @property
    def gpu(self) -> int | None:
        """The GPU the tenant runs on, as the host numbers it (NVML's minor number: /dev/nvidiaN)."""
        for device in self.devices:
            if isinstance(device.get("minor"), int):
                return int(device["minor"])
        return None

    @property
    def gpu_instance(self) -> int | None:
        """The MIG GPU instance id of the tenant's slice (None: a whole GPU, or not visible)."""
        for device in self.devices:
            for mig in device.get("mig_devices") or ():
                if isinstance(mig.get("gpu_instance"), int):
                    return int(mig["gpu_instance"])
        return None


def probe_fields(line: str) -> dict[str, Any] | None:
    """The JSON object a ``FIREDRILL-PROBE`` line carries, or None when the line is not a probe's (or is torn);
    the access probe (:mod:`drills.workloads.accessprobe`) writes its lines so too."""
    if not line.startswith(MARKER):
        return None
    try:
        data = json.loads(line[len(MARKER):])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse_probe_line(line: str) -> ProbeReport | None:
    """The report on one log line, or None when the line is not the probe's (or is torn)."""
    data = probe_fields(line)
    if data is None:
        return None
    try:
        event = ProbeEvent(data.get("event", "report"))
    except ValueError:
        return None
    return ProbeReport(event, bool(data.get("ok")), tuple(d for d in data.get("devices") or () if isinstance(d, dict)),
                       int(data.get("allocated_mib") or 0), data.get("allocator"), data.get("error"),
                       data.get("reason"), int(data.get("share_mib") or 0), int(data.get("wanted_mib") or 0))


def parse_probe_lines(log: str) -> list[ProbeReport]:
    """Every probe report in a pod log, in order."""
    return [r for line in log.splitlines() if (r := parse_probe_line(line)) is not None]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    devices: tuple[dict[str, Any], ...]
    allocated_mib: int
    allocator: str | None
    error: str | None


def parse_probe_output(log: str) -> ProbeResult | None:
    """The last report in a pod log as a :class:`ProbeResult`, or None when the log holds none."""
    reports = parse_probe_lines(log)
    if not reports:
        return None
    last = reports[-1]
    return ProbeResult(last.ok, last.devices, last.allocated_mib, last.allocator, last.error)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
