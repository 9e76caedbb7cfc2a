"""The accelerator access probe: what a pod can see and open of its node's GPUs, in its own words.

Every pod of the accelerator access drill (``drills.kinds.access``, docs/ACCESS.md) runs this program
(``python3 -c <source> access ...``; standard library only, so any image with ``python3`` will do).  It
reports through its pod log, one ``FIREDRILL-PROBE {json}`` line per event, as the isolation probe
(:mod:`drills.workloads.probe`) does, and the harness reads those lines through ``pods/log``:

- one ``start`` line first, with ``gpus``: the devices the pod was told it holds (``NVIDIA_VISIBLE_DEVICES``:
  UUIDs or indexes; with the device plugin's ``volume-mounts`` strategy the variable names a directory,
  ``/var/run/nvidia-container-devices``, holding one entry per device).  It is the identity line the
  invariant watch reads (GPU exclusivity, docs/INVARIANTS.md), as the canaries' ``start`` lines are;
- then one ``access`` line a round, every ``--period`` seconds for ``--rounds`` rounds: the GPU device
  nodes present in its ``/dev`` (``nvidia0``, ``nvidia1``, ...), what NVML (``libnvidia-ml.so.1``, through
  ``ctypes``) counts, where the container has it, and, for each of the node's GPUs (``nvidia0`` up to
  ``--try``, and any other node it finds), whether a real ``open()`` of its device node succeeded.  The
  probe keeps every device it opened open for its whole life: it *holds* them, as a CUDA process does.
  After its rounds it keeps holding, silent, until it is deleted.

A device node that is not in ``/dev`` does not mean the GPU is fenced off: a container with ``CAP_MKNOD``
(containerd's default) can make the node itself.  On a real node the probe does exactly that for a GPU it
does not find (in a scratch directory, with the NVIDIA driver's major number from ``/proc/devices``) and
opens it: only the device cgroup stands in the way then, and ``made`` says whether it did (``denied``).

On the reference platform a container's ``/dev`` is the directory ``FIREDRILL_DEVICE_DIR`` names (the agent
writes one file per GPU it was given, holding the GPU's identity, as NVML would name it:
``refplatform.agent.devnodes``).  There the probe reads identities from those files and does not ask NVML,
whose answer would be the machine's, not the container's.

The program is the source of this module's functions (:func:`program_source`), so the tests run exactly
what a pod runs.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from drills.workloads.probe import DRIVER_CAPABILITIES, _emit, _nvml_devices, probe_fields

__all__ = ["ACCESS_EVENT", "ALL_DEVICES", "DEVICE_DIR_ENV", "Attempt", "AccessReport", "Outcome", "access_args",
           "access_pod", "device_number", "parse_access_line", "parse_access_lines", "program_source"]

ACCESS_EVENT = "access"
DEVICE_DIR_ENV = "FIREDRILL_DEVICE_DIR"
"""Where the reference platform tells a container its device nodes are (a real container's are in ``/dev``)."""
VISIBLE_ENV = "NVIDIA_VISIBLE_DEVICES"
ALL_DEVICES = "all"
"""``NVIDIA_VISIBLE_DEVICES=all``: what CUDA images set, asking for every GPU of the node."""
KEYWORDS = frozenset({"all", "none", "void", ""})
"""Values of ``NVIDIA_VISIBLE_DEVICES`` that name no device (the container toolkit's keywords)."""
_NODE = re.compile(r"^nvidia([0-9]+)$")


# ------------------------------------------------------------------ the program (runs inside the pod)
# Everything from here to program_source() is shipped as source text (with the isolation probe's _emit and
# _nvml_devices): standard library only, no names from outside these functions.


def _told() -> tuple:  # pragma: no cover - exercised through subprocesses
    """(variable, raw, gpus): what told this process its GPUs, as set, and the devices it names (None when no
    variable is set): ``NVIDIA_VISIBLE_DEVICES``, else on Slurm ``SLURM_STEP_GPUS`` (the node's GPU indexes the
    step was given; its ``CUDA_VISIBLE_DEVICES`` counts from 0 in every job where devices are constrained)."""
    import os

    name = "NVIDIA_VISIBLE_DEVICES"
    raw = os.environ.get(name)
    if raw is None and os.environ.get("SLURM_STEP_GPUS", "").strip():
        name = "SLURM_STEP_GPUS"
        raw = os.environ[name]
    if raw is None:
        return name, None, None
    value = raw.strip()
    if value.startswith("/"):  # the device plugin's volume-mounts strategy: one entry per device in that directory
        try:
            return name, raw, sorted(os.listdir(value))
        except OSError:
            return name, raw, []
    return name, raw, [v.strip() for v in value.split(",") if v.strip()]


def _device_nodes(directory: str) -> list:  # pragma: no cover - exercised through subprocesses
    """The GPU device nodes (``nvidiaN``) in ``directory``, in their numbers' order."""
    import os
    import re as _re

    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted((n for n in names if _re.fullmatch(r"nvidia[0-9]+", n)), key=lambda n: int(n[6:]))


def _nvidia_major() -> Any:  # pragma: no cover - exercised through subprocesses
    """The NVIDIA driver's character-device major number (``/proc/devices``), or None."""
    try:
        with open("/proc/devices") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1] in ("nvidia-frontend", "nvidia"):
                    return int(parts[0])
    except OSError:
        return None
    return None


def _open_device(directory: str, name: str, major: Any, scratch: Any) -> tuple:  # pragma: no cover - subprocess
    """(attempt, fd): try to open one GPU's device node; where it is absent from a real ``/dev``, make the node
    in ``scratch`` (as a container with CAP_MKNOD can) and try that, so only the device cgroup can refuse."""
    import errno
    import os
    import stat

    attempt: dict = {"device": name}
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDWR)
    except FileNotFoundError:
        attempt["outcome"] = "absent"
        if major is None or scratch is None:
            return attempt, None
        made = os.path.join(scratch, name)
        try:
            os.mknod(made, 0o600 | stat.S_IFCHR, os.makedev(major, int(name[6:])))
        except OSError as exc:
            attempt["made"] = f"refused: {exc.strerror}"
            return attempt, None
        try:
            fd = os.open(made, os.O_RDWR)
        except OSError as exc:  # EPERM: the device cgroup; ENXIO: no such GPU behind that number
            refused = "denied" if exc.errno in (errno.EPERM, errno.EACCES) else "failed"
            attempt["made"] = f"{refused}: {exc.strerror}"
            return attempt, None
        finally:
            os.unlink(made)
        attempt["made"] = "opened"
    except PermissionError as exc:
        attempt.update(outcome="denied", error=exc.strerror)
        return attempt, None
    except OSError as exc:  # ENXIO, ENODEV: past every access check, but no driver answers that number
        unbacked = exc.errno in (errno.ENXIO, errno.ENODEV)
        attempt.update(outcome="unbacked" if unbacked else "error",
                       error=f"{type(exc).__name__}: {exc.strerror or exc}")
        return attempt, None
    attempt["outcome"] = "opened"
    if stat.S_ISREG(os.fstat(fd).st_mode):  # the reference platform's modelled node: it holds its GPU's identity
        attempt["identity"] = os.pread(fd, 256, 0).decode(errors="replace").strip() or None
    return attempt, fd


def main(argv: list) -> int:  # pragma: no cover - exercised through subprocesses
    import argparse
    import os
    import tempfile
    import time

    parser = argparse.ArgumentParser(prog="firedrill-access-probe")
    modes = parser.add_subparsers(dest="mode", required=True)
    access = modes.add_parser("access")
    access.add_argument("--try", dest="attempt", type=int, default=8, help="try nvidia0 .. nvidia<N-1>")
    access.add_argument("--period", type=float, default=0.5)
    access.add_argument("--rounds", type=int, default=60)
    access.add_argument("--dev", default=None, help="the host's device directory every job of the node shares "
                        "(bare-metal Slurm): a device node there is seen only where its open passes")
    args = parser.parse_args(argv[1:])

    modelled = None if args.dev else os.environ.get("FIREDRILL_DEVICE_DIR")
    directory = args.dev or modelled or "/dev"
    told, raw, gpus = _told()
    _emit("start", {"gpus": gpus, "visible": raw, "told": told, "dir": directory, "shared_dev": bool(args.dev)})
    major = None if modelled else _nvidia_major()
    scratch = tempfile.mkdtemp(prefix="firedrill-access-") if major is not None else None
    held: dict = {}
    for round_ in range(1, args.rounds + 1):
        started = time.time()
        nodes = _device_nodes(directory)
        if modelled:
            devices, nvml_error = [], "not asked: this container's GPUs are the device directory's (reference platform)"
        else:
            devices, nvml_error = _nvml_devices()
        by_minor = {d["minor"]: d.get("uuid") for d in devices if isinstance(d.get("minor"), int)}
        names = sorted({*nodes, *(f"nvidia{i}" for i in range(args.attempt))}, key=lambda n: int(n[6:]))
        attempts = []
        for name in names:
            if name in held:
                attempt = dict(held[name][1])
            else:
                attempt, fd = _open_device(directory, name, major, scratch)
                if fd is not None:
                    held[name] = (fd, attempt)
            if not attempt.get("identity") and by_minor.get(int(name[6:])):
                attempt["identity"] = by_minor[int(name[6:])]
            attempts.append(attempt)
        _emit("access", {"round": round_, "started": started, "ts": time.time(), "dir": directory, "nodes": nodes,
                         "visible": raw, "told": told, "gpus": gpus, "shared_dev": bool(args.dev),
                         "nvml": {"count": None if nvml_error else len(devices),
                                  "uuids": [d.get("uuid") for d in devices], "error": nvml_error},
                         "attempts": attempts})
        time.sleep(args.period)
    while True:  # keep holding what it opened until the pod is deleted
        time.sleep(3600)


_PROGRAM = (_emit, _nvml_devices, _told, _device_nodes, _nvidia_major, _open_device, main)


def program_source() -> str:
    """The probe as a standalone program for ``python3 -c`` (``sys.argv[0]`` is ``-c``)."""
    parts = ["from __future__ import annotations\n\nfrom typing import Any\n"] + [
        inspect.getsource(part) for part in _PROGRAM]
    return "\n\n".join(parts) + "\nimport sys\nsys.exit(main(sys.argv))\n"


# ------------------------------------------------------------------------ the harness's side


def access_args(*, attempt: int, period: float = 0.5, rounds: int = 60, dev: str | None = None) -> list[str]:
    """The probe's arguments: try ``nvidia0`` to ``nvidia<attempt-1>``, report every ``period`` s, ``rounds`` times;
    ``dev``: the host's device directory, which every job of the node shares (bare-metal Slurm)."""
    return ["access", "--try", str(attempt), "--period", f"{period:g}", "--rounds", str(rounds),
            *(["--dev", dev] if dev else [])]


def access_pod(name: str, namespace: str, image: str, *, resource: str, gpus: int, node: str, args: list[str],
               labels: Mapping[str, str] | None = None, ask_all: bool = False,
               tolerations: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """A pod on ``node`` that requests ``gpus`` of ``resource`` (none when 0) and runs the probe; ``ask_all``:
    its environment asks for every GPU, as CUDA images do (``NVIDIA_VISIBLE_DEVICES=all``)."""
    env = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": DRIVER_CAPABILITIES},
           {"name": "PYTHONUNBUFFERED", "value": "1"}]
    if ask_all:
        env.insert(0, {"name": VISIBLE_ENV, "value": ALL_DEVICES})
    container: dict[str, Any] = {"name": "probe", "image": image,
                                 "command": ["python3", "-c", program_source(), *args], "env": env}
    if gpus:
        container["resources"] = {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}}
    spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                            "nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}


def device_number(name: str) -> int | None:
    """``nvidia3`` -> 3 (the device node's minor number); None for another name."""
    m = _NODE.match(name)
    return int(m.group(1)) if m else None


class Outcome(Enum):
    """What one ``open()`` of a GPU's device node came to."""

    OPENED = "opened"
    """It opened: the pod reaches that GPU (directly, or through a node it made itself)."""
    ABSENT = "absent"
    """No such node in its ``/dev``, and, on a real node, one it made itself could not be opened either."""
    DENIED = "denied"
    """The node is there but the open was refused (permissions, the device cgroup)."""
    UNBACKED = "unbacked"
    """The open passed every access check (the device cgroup included) but no driver answers that device number
    (``ENXIO``/``ENODEV``): a simulated GPU, or one gone from the bus. The process reaches it as far as access
    control goes, which is what the promise is about, so it counts as opened (it holds nothing, though)."""
    ERROR = "error"
    """Any other failure (the driver refused the device, ...)."""


@dataclass(frozen=True)
class Attempt:
    """One device node the probe tried to open, in one round."""

    device: str
    outcome: Outcome
    identity: str | None = None
    """The GPU's identity where the probe could read it (the reference platform's node, or NVML by minor)."""
    made: str | None = None
    """A real node without the device node: what became of the node it made itself (``opened``, ``denied: ...``,
    ``refused: ...`` when it could not make it, ``failed: ...`` when no GPU answers that number); None where it did
    not try."""
    error: str | None = None

    @property
    def opened(self) -> bool:
        """Reached: the open passed access control (it opened, or only the missing driver stopped it)."""
        return self.outcome in (Outcome.OPENED, Outcome.UNBACKED)


@dataclass(frozen=True)
class AccessReport:
    """One ``access`` line: what the pod saw and opened in one round (its own clock: ``started``, ``ts``)."""

    round: int
    started: float
    """When the round's attempts began (epoch seconds, the node's clock)."""
    ts: float
    """When the round ended (the devices it opened are held from then on)."""
    directory: str
    nodes: tuple[str, ...]
    """The GPU device nodes present in its ``/dev`` (or the reference platform's device directory)."""
    visible: str | None
    """``NVIDIA_VISIBLE_DEVICES`` as the container has it (None: unset)."""
    gpus: tuple[str, ...] | None
    """The devices that names (UUIDs, indexes, or a keyword such as ``all``); None when unset."""
    told_by: str
    """The variable that told it (``NVIDIA_VISIBLE_DEVICES``; on Slurm ``SLURM_STEP_GPUS`` where that is unset)."""
    shared_dev: bool
    """Its device directory is the host's, shared by every job of the node (bare-metal Slurm, ``--dev``): a device
    node there is no sign the process sees that GPU, only a passing open is."""
    nvml_count: int | None
    """How many GPUs NVML counts inside the container; None where it could not be asked (``nvml_error``)."""
    nvml_uuids: tuple[str, ...] = ()
    nvml_error: str | None = None
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    @property
    def opened(self) -> tuple[str, ...]:
        """The device nodes it opened (and holds), in order."""
        return tuple(a.device for a in self.attempts if a.opened)

    @property
    def tried(self) -> frozenset[str]:
        return frozenset(a.device for a in self.attempts)

    @property
    def seen(self) -> tuple[str, ...]:
        """Every GPU device node it can see: present in its ``/dev``, or opened; where every job of the node shares
        the host's device directory (:attr:`shared_dev`), only those it opened (NVML, too, enumerates only the GPUs
        the device cgroup lets a process open)."""
        present = () if self.shared_dev else self.nodes
        return tuple(sorted({*present, *self.opened}, key=lambda n: (device_number(n) or 0, n)))

    @property
    def seen_count(self) -> int:
        """The GPUs it sees, by whichever witness counts more: its device nodes, or NVML."""
        return max(len(self.seen), self.nvml_count or 0)

    @property
    def named(self) -> tuple[str, ...] | None:
        """The devices ``NVIDIA_VISIBLE_DEVICES`` names as its own (keywords such as ``all`` name none); None
        when it names none."""
        if self.gpus is None:
            return None
        named = tuple(g for g in self.gpus if g.lower() not in KEYWORDS)
        return named or None

    def identity(self, device: str) -> str | None:
        """The identity of one of its device nodes, where the probe could read it."""
        return next((a.identity for a in self.attempts if a.device == device and a.identity), None)

    def attempt(self, device: str) -> Attempt | None:
        return next((a for a in self.attempts if a.device == device), None)


def _attempt(raw: Any) -> Attempt | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("device"), str):
        return None
    try:
        outcome = Outcome(raw.get("outcome"))
    except ValueError:
        return None
    text = lambda key: str(raw[key]) if raw.get(key) else None  # noqa: E731
    return Attempt(raw["device"], outcome, text("identity"), text("made"), text("error"))


def _strings(raw: Any) -> tuple[str, ...] | None:
    return tuple(str(g) for g in raw) if isinstance(raw, list) else None


def parse_access_line(line: str) -> AccessReport | None:
    """The ``access`` report on one log line, or None (another line, another event, a torn line)."""
    data = probe_fields(line)
    if data is None or data.get("event") != ACCESS_EVENT:
        return None
    try:
        round_, started, ts = int(data["round"]), float(data["started"]), float(data["ts"])
    except (KeyError, TypeError, ValueError):
        return None
    nvml = data.get("nvml") if isinstance(data.get("nvml"), dict) else {}
    count = nvml.get("count")
    attempts = tuple(a for a in map(_attempt, data.get("attempts") or ()) if a is not None)
    return AccessReport(round_, started, ts, str(data.get("dir") or ""),
                        tuple(str(n) for n in data.get("nodes") or () if isinstance(n, str)),
                        data["visible"] if isinstance(data.get("visible"), str) else None,
                        _strings(data.get("gpus")), str(data.get("told") or VISIBLE_ENV), data.get("shared_dev") is True,
                        count if isinstance(count, int) and not isinstance(count, bool) else None,
                        tuple(str(u) for u in nvml.get("uuids") or () if u),
                        str(nvml["error"]) if nvml.get("error") else None, attempts)


def parse_access_lines(log: str) -> list[AccessReport]:
    """Every ``access`` report in a pod log, in order."""
    return [r for line in log.splitlines() if (r := parse_access_line(line)) is not None]
