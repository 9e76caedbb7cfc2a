"""The container runtime: a container that has ``command`` runs as a real OS process.

The rule (docs/WORKLOAD.md, "How the reference platform runs a container"): a
pod whose containers have ``command`` runs each of them as a child process of
its node's agent; a pod whose containers have none runs the simulated workload
named by ``firedrill.dev/workload`` (idle by default; the simulated kinds stay
for scale tests that cannot afford a process per pod).  A pod that mixes the
two is refused.

Each process:

- gets its ``argv``, environment and working directory from :func:`process_specs`
  (``$(VAR)`` expansion, ``env`` with ``fieldRef``, ``PATH``, volumes mapped by
  rewriting paths; :mod:`refplatform.agent.podenv`, :mod:`refplatform.agent.volumes`),
  plus ``FIREDRILL_DEVICE_SOCKET`` (the node's simulated GPU driver) and ``FIREDRILL_DEVICE_CLOCKS``
  (its clocks file: :mod:`refplatform.gpu.throttle`), the GPUs it was given (``NVIDIA_VISIBLE_DEVICES``, and
  ``FIREDRILL_DEVICE_DIR``, its own directory of device nodes: :mod:`refplatform.agent.devnodes`), ``HOSTNAME``
  (the pod's name), ``HOME`` (the container's own directory) and, from the agent,
  ``PYTHONPATH``, ``LANG``, ``LC_ALL``, ``TZ`` and ``TMPDIR`` where set;
- is a child of the agent, in the agent's process group (so a fault that signals
  the group reaches it), with ``PR_SET_PDEATHSIG=SIGKILL`` so it dies with the
  agent (the kernel sends it when the agent's *pod sync thread* ends, which is
  why only that thread starts processes);
- runs :data:`POD_NICENESS` steps nicer than the agent, as a kubelet's
  ``kube-reserved`` keeps CPU for the node's own daemons: pods compete with one
  another for the CPU, and the agent's and the API server's status writes (whose
  instants the drills time) are not starved when several interpreters boot at once;
- writes stdout and stderr, line by line, to the container's log
  (:class:`~refplatform.agent.logs.ContainerLog`), each line stamped with the
  agent's clock when the agent read it; the lines also feed the platform's log
  pipeline (:class:`~refplatform.agent.canarylog.TrainingLog`);
- ends with an exit code: ``0`` is reason ``Completed``, anything else ``Error``;
  a process killed by signal ``N`` exits ``128 + N``, as a shell reports it.

:meth:`ProcessWorkload.terminate` sends SIGTERM to every container's main
process and SIGKILL to those still running at the grace period's end; the pod
sync drives it without waiting (:meth:`ProcessWorkload.advance` on each pass).
The pod ends when every container has ended and its output has been read
(or :data:`REAP_SECONDS` after, when a leftover child still holds the pipe).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from refplatform.agent.canarylog import TrainingLog
from refplatform.agent.clock import Clock, rfc3339_millis
from refplatform.agent.device import Device
from refplatform.agent.devnodes import DEVICE_DIR_ENV, ContainerDevices, write_device_dir
from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.logs import ContainerLog
from refplatform.agent.podenv import EnvSource, PodFacts, container_path, expand, resolve_env
from refplatform.agent.volumes import NodeDirs, Volume, container_mounts, pod_volumes, rewrite
from refplatform.agent.workload import (
    ANN_COMM_STALL_SECONDS,
    ANN_INPUT_STALL_SECONDS,
    ANN_PEER_WAIT_SECONDS,
    ANN_PROGRESS_AT,
    ANN_STEP_SECONDS,
    ANN_STEPPED_SECONDS,
    Exit,
    LogLine,
    Workload,
)
from refplatform.gpu.identity import VISIBLE_DEVICES_ENV
from refplatform.gpu.throttle import CLOCKS_ENV, CLOCKS_FILE

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEVICE_SOCKET_ENV",
    "POD_NICENESS",
    "ProcessSpec",
    "ProcessWorkload",
    "grace_seconds",
    "has_command",
    "process_specs",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEVICE_SOCKET_ENV = "FIREDRILL_DEVICE_SOCKET"
LINK_ENV = "FIREDRILL_LINK_BANDWIDTH"
"""The node's link in bytes per second (:mod:`refplatform.fabric`): the canary paces its connections to it."""
DEFAULT_GRACE_SECONDS = 30.0
REAP_SECONDS = 2.0
"""How long after its last process exited a pod waits for its output pipes to close."""
INHERITED = ("PYTHONPATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""Variables a container takes from the agent's environment (what the canary image would set)."""
POD_NICENESS = 19
"""How many steps nicer than the agent a pod's processes run (``nice(2)``, the most there is). CFS gives a nice-0
task about 68 times the CPU weight of a nice-19 one (about 9 times at nice 10, too little: on a small host the
API server then waited as long for the CPU as it ran while four booting interpreters restarted, which delayed the
status writes the node pull drill times; docs/BENCHMARKS.md, issue 30). Pods still get every idle cycle."""
MAX_LINE = 65536
"""Longer output lines are split."""

_PR_SET_PDEATHSIG = 1
_libc: Any = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - every Linux has a libc
        _libc = None


def _child_setup(parent: int, niceness: int) -> Callable[[], None]:
    """Runs in the child between fork and exec: yield CPU to the agent by ``niceness`` steps, and die with the agent
    (PR_SET_PDEATHSIG), or now if it is gone."""

    def setup() -> None:
        if niceness:
            os.nice(niceness)
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the agent died before prctl: the signal will never come
            os._exit(128 + signal.SIGKILL)

    return setup


def has_command(pod: Obj) -> bool:
    """Whether any container of the pod has a ``command`` (the pod then runs as real processes)."""
    return any(isinstance(c, dict) and c.get("command") for c in (pod.get("spec") or {}).get("containers") or [])


def grace_seconds(pod: Obj) -> float:
    """The pod's grace period: ``deletionGracePeriodSeconds``, else ``terminationGracePeriodSeconds``, else 30."""
    meta = pod.get("metadata") or {}
    for raw in (meta.get("deletionGracePeriodSeconds"), (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):
        if raw is None or isinstance(raw, bool):
            continue
        try:
            return max(0.0, float(raw))
        except (TypeError, ValueError):
            continue
    return DEFAULT_GRACE_SECONDS


@dataclass(frozen=True)
class ProcessSpec:
    """How to start one container's process."""

    container: str
    argv: tuple[str, ...]
    executable: str
    """The resolved program (``argv[0]`` looked up in the container's ``PATH``)."""
    env: dict[str, str]
    cwd: Path


def _strings(value: object, at: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ContainerSpecError(f"{at}: must be a list of strings")
    return list(value)


_HOST_NAMESPACES = ("hostPID", "hostNetwork", "hostIPC")


def refuse_host_access(pod: Obj) -> None:
    """The reference agent runs containers as plain processes of this machine, with the agent's own
    privileges and no isolation: a privileged container or one asking for the host's namespaces (a
    ``kubelet-stop`` fault pod running ``nsenter``) would act on this machine itself, so it is refused."""
    spec = pod.get("spec") or {}
    for key in _HOST_NAMESPACES:
        if spec.get(key) is True:
            raise ContainerSpecError(f"spec.{key}: the reference platform runs containers as processes of this "
                                     "machine and refuses pods that ask for the host's namespaces")
    for i, c in enumerate([*(spec.get("initContainers") or []), *(spec.get("containers") or [])]):
        ctx = (c or {}).get("securityContext") or {}
        if ctx.get("privileged") is True:
            raise ContainerSpecError(f"container {c.get('name', i)!r}: securityContext.privileged: the reference "
                                     "platform runs containers as processes of this machine and refuses "
                                     "privileged ones")


def process_specs(pod: Obj, facts: PodFacts, dirs: NodeDirs, *, device_socket: str | None,
                  path: str | None = None, agent_env: Mapping[str, str] | None = None,
                  link_bandwidth: float | None = None,
                  devices: Mapping[str, ContainerDevices] | None = None,
                  env_objects: Mapping[EnvSource, Mapping[str, str] | None] | None = None) -> list[ProcessSpec]:
    """Every container's :class:`ProcessSpec`; creates the volume and working directories.

    ``devices``: what each container (by name) was given, as the device plugin and the container toolkit give
    it (:func:`refplatform.agent.devnodes.container_devices`): ``NVIDIA_VISIBLE_DEVICES`` where set, and its
    device directory (written here, ``FIREDRILL_DEVICE_DIR``); None: no container is given a GPU (every one
    still gets an empty device directory, as a container's ``/dev`` has no GPU node).
    ``env_objects``: the ConfigMaps and Secrets the containers' ``env``/``envFrom`` read (fetched by the agent).
    ``link_bandwidth``: the node's link in bytes per second, told every container as ``FIREDRILL_LINK_BANDWIDTH``
    (the simulated fabric, :mod:`refplatform.fabric`); None: nothing is told, the sockets go as fast as they go.

    Raises :class:`ContainerSpecError` naming the field for anything the agent cannot run.
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    refuse_host_access(pod)
    volumes, problems = pod_volumes(pod, dirs)
    agent_env = os.environ if agent_env is None else agent_env
    default_path = container_path(agent_env.get("PATH")) if path is None else path
    out: list[ProcessSpec] = []
    for i, c in enumerate(containers):
        where = f"spec.containers[{i}]"
        name = str(c.get("name") or "main")
        command = _strings(c.get("command"), f"{where}.command")
        args = _strings(c.get("args"), f"{where}.args")
        if not command:
            raise ContainerSpecError(f"{where}.command: required when another container of the pod has one "
                                     "(a pod runs real processes or one simulated workload, not both)")
        mounts = container_mounts(c, where, volumes, problems)
        injected = {DEVICE_SOCKET_ENV: device_socket,
                    CLOCKS_ENV: str(Path(device_socket).parent / CLOCKS_FILE)} if device_socket else {}
        if link_bandwidth is not None:
            injected[LINK_ENV] = f"{link_bandwidth:g}"
        given = (devices or {}).get(name, ContainerDevices(None, ()))
        if given.visible is not None:
            injected[VISIBLE_DEVICES_ENV] = given.visible
        device_dir = dirs.device_dir(facts.uid, name)
        write_device_dir(device_dir, given)
        injected[DEVICE_DIR_ENV] = str(device_dir)
        declared = resolve_env(c, where, facts, injected, env_objects)
        own = {e["name"] for e in c.get("env") or [] if isinstance(e, dict) and isinstance(e.get("name"), str)}
        argv = [rewrite(expand(a, declared.get), mounts) for a in command + args]
        base = {k: agent_env[k] for k in INHERITED if agent_env.get(k)}
        base.update(PATH=default_path, HOSTNAME=facts.name)
        home = dirs.container_dir(facts.uid, name)
        base["HOME"] = str(home)
        env = {**base, **{k: (rewrite(v, mounts) if k in own else v) for k, v in declared.items()}}
        dirs.prepare(volumes.values())
        for m in mounts:  # a subPath inside a directory volume
            if _creatable(volumes, m.directory):
                m.directory.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        cwd = home
        raw_dir = c.get("workingDir")
        if raw_dir:
            if not isinstance(raw_dir, str) or not raw_dir.startswith("/"):
                raise ContainerSpecError(f"{where}.workingDir: must be an absolute path (got {raw_dir!r})")
            mapped = rewrite(raw_dir, mounts)
            if mapped != raw_dir:
                Path(mapped).mkdir(parents=True, exist_ok=True)  # inside a volume: the runtime creates it
            elif not Path(mapped).is_dir():
                raise ContainerSpecError(f"{where}.workingDir: {raw_dir} does not exist on the node "
                                         "(mount a volume there, or use an existing directory)")
            cwd = Path(mapped)
        program = argv[0]
        search = env.get("PATH", default_path)
        if "/" in program:
            candidate = program if program.startswith("/") else str(cwd / program)
            executable = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
        else:
            executable = shutil.which(program, path=search)
        if executable is None:
            raise ContainerSpecError(f"{where}.command[0]: executable {program!r} not found"
                                     + ("" if "/" in program else f" in PATH {search}"))
        out.append(ProcessSpec(name, tuple(argv), executable, env, cwd))
    return out


def _creatable(volumes: Mapping[str, Volume], directory: Path) -> bool:
    """Whether ``directory`` lies in a volume whose directory the agent creates."""
    for v in volumes.values():
        if v.create and (directory == v.directory or v.directory in directory.parents):
            return True
    return False


def exit_code(returncode: int) -> int:
    """A Popen return code as the runtime reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class _Container:
    """One running process and the threads reading its output."""

    def __init__(self, spec: ProcessSpec, log_: ContainerLog) -> None:
        self.spec = spec
        self.log = log_
        self.popen: subprocess.Popen[bytes] | None = None
        self.readers: list[threading.Thread] = []
        self.exit: Exit | None = None
        self.exited_at: datetime | None = None
        self.killed = False

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def drained(self) -> bool:
        return not any(t.is_alive() for t in self.readers)


class ProcessWorkload(Workload):
    """The real processes of one pod, driven by the pod sync thread.  Not thread-safe (its readers are)."""

    kind = "process"

    def __init__(self, uid: str, specs: list[ProcessSpec], logs: Mapping[str, ContainerLog], clock: Clock,
                 device: Device | None = None, *, publish_step_seconds: bool = True,
                 reap_seconds: float = REAP_SECONDS, niceness: int = POD_NICENESS) -> None:
        super().__init__()
        self.niceness = niceness
        self.uid = uid
        self.clock = clock
        self.device = device
        self.publish_step_seconds = publish_step_seconds
        self.reap_seconds = reap_seconds
        self.containers = [_Container(s, logs[s.container]) for s in specs]
        self.training = TrainingLog()
        self.stopping_since: datetime | None = None
        self.kill_at: datetime | None = None
        self._lock = threading.Lock()
        self._pending: deque[tuple[str, datetime]] = deque()
        self._progress: dict[str, str] = {}

    # -- what the pod sync reads ---------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self.stopping_since is not None

    def pids(self) -> dict[str, int]:
        """The main process id of each started container."""
        return {c.spec.container: c.popen.pid for c in self.containers if c.popen is not None}

    def container_exits(self) -> dict[str, Exit]:
        """The containers that have ended, by name."""
        return {c.spec.container: c.exit for c in self.containers if c.exit is not None}

    def progress(self) -> dict[str, str]:
        return dict(self._progress)

    # -- lifecycle -----------------------------------------------------------------------

    def _on_start(self, now: datetime) -> list[LogLine]:
        if self.device is not None:
            self.device.attach(self.uid, now)
        parent = os.getpid()
        for c in self.containers:
            try:
                c.popen = subprocess.Popen(
                    list(c.spec.argv), executable=c.spec.executable, env=c.spec.env, cwd=c.spec.cwd,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                    preexec_fn=_child_setup(parent, self.niceness),  # noqa: PLW1509 - only nice, prctl, getppid
                )
            except OSError as err:
                self._abort(now)
                raise ContainerSpecError(f"container {c.spec.container}: cannot start {c.spec.executable}: "
                                         f"{err.strerror or err}") from None
            if self.device is not None:
                self.device.add_process(self.uid, c.popen.pid)
            assert c.popen.stdout is not None and c.popen.stderr is not None
            for stream, label in ((c.popen.stdout, "stdout"), (c.popen.stderr, "stderr")):
                t = threading.Thread(target=self._read, args=(c, stream), daemon=True,
                                     name=f"log-{c.spec.container}-{label}-{c.popen.pid}")
                t.start()
                c.readers.append(t)
            log.info("container %s: started pid %d: %s", c.spec.container, c.popen.pid, " ".join(c.spec.argv))
        return []

    def _abort(self, now: datetime) -> None:
        """A later container failed to start: kill the ones already running."""
        for c in self.containers:
            if c.popen is not None and c.popen.poll() is None:
                c.popen.kill()
                c.popen.wait()
            if c.popen is not None and self.device is not None:
                self.device.process_gone(self.uid, c.popen.pid, now)
        if self.device is not None:
            self.device.detach(self.uid, now)

    def _read(self, c: _Container, stream: IO[bytes]) -> None:
        try:
            while True:
                raw = stream.readline(MAX_LINE)
                if not raw:
                    return
                text = raw.decode("utf-8", "replace")
                if text.endswith("\n"):
                    text = text[:-1]
                at = self.clock.now()
                c.log.append([LogLine(at, text)])
                with self._lock:
                    self._pending.append((text, at))
        except (OSError, ValueError):
            return
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def terminate(self, now: datetime, grace: float) -> None:
        """SIGTERM every running container now; SIGKILL those still running ``grace`` seconds later."""
        if self.stopping or self.exit is not None:
            return
        self.stopping_since = now
        self.kill_at = now + timedelta(seconds=max(0.0, grace))
        self.killed = True
        for c in self.containers:
            if c.popen is not None and c.exit is None and c.popen.poll() is None:
                c.popen.send_signal(signal.SIGTERM)
                log.info("container %s: SIGTERM to pid %d (grace %.0fs)", c.spec.container, c.popen.pid, grace)

    def stop(self, now: datetime) -> list[LogLine]:
        """SIGTERM with the default grace period (the pod sync passes the pod's own to :meth:`terminate`)."""
        self.terminate(now, DEFAULT_GRACE_SECONDS)
        return self.advance(now)

    def kill_now(self, now: datetime) -> None:
        """SIGKILL whatever still runs (the agent is shutting down, or the grace period is over)."""
        for c in self.containers:
            if c.popen is not None and c.exit is None and c.popen.poll() is None and not c.killed:
                c.killed = True
                c.popen.send_signal(signal.SIGKILL)
                log.info("container %s: SIGKILL to pid %d", c.spec.container, c.popen.pid)

    def signal_running(self, sig: int) -> int:
        """Send ``sig`` to every container process still running (the device reporting a fault to its users, as
        the driver fails their next call); how many got it."""
        sent = 0
        for c in self.containers:
            if c.popen is not None and c.exit is None and c.popen.poll() is None:
                c.popen.send_signal(sig)
                sent += 1
        return sent

    def fail(self, now: datetime, how: Exit) -> None:
        """The pod's device failed (an injected Xid, GPU memory): SIGKILL every process and end with ``how``."""
        self.kill_now(now)
        self.wait(1.0)
        for c in self.containers:
            if c.popen is not None and c.exit is None:
                c.exit = how
                c.exited_at = now
                if self.device is not None:
                    self.device.process_gone(self.uid, c.popen.pid, now)
        self._read_pipeline()
        self._snapshot(now)
        self.exit = how
        if self.device is not None:
            self.device.detach(self.uid, now)

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds for every process to exit (the agent's shutdown only)."""
        for c in self.containers:
            if c.popen is not None:
                try:
                    c.popen.wait(timeout=max(0.0, timeout))
                except subprocess.TimeoutExpired:
                    return

    def _advance(self, now: datetime) -> list[LogLine]:
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_now(now)
        for c in self.containers:
            if c.popen is None or c.exit is not None:
                continue
            rc = c.popen.poll()
            if rc is None:
                continue
            code = exit_code(rc)
            c.exit = Exit.of(code, now)
            c.exited_at = now
            if self.device is not None:
                self.device.process_gone(self.uid, c.popen.pid, now)
            log.info("container %s: pid %d exited %d", c.spec.container, c.popen.pid, code)
        if self.device is not None:
            self.device.sweep(self.uid, now)
        self._read_pipeline()
        ended = [c for c in self.containers if c.exit is not None]
        if len(ended) == len(self.containers):
            last = max(c.exited_at for c in ended if c.exited_at is not None)
            reaped = all(c.drained() for c in ended) or (now - last).total_seconds() >= self.reap_seconds
            if reaped:
                self._read_pipeline()
                self._snapshot(now)
                failed = next((c.exit for c in ended if c.exit is not None and c.exit.code != 0), None)
                self.exit = failed or Exit.of(0, last)
                if self.device is not None:
                    self.device.detach(self.uid, now)
                return []
        self._snapshot(now)
        return []

    def _read_pipeline(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, deque()
        for text, at in pending:
            self.training.feed(text, at)
        for ev in self.training.take_events():
            self._event(ev.at, ev.type, ev.reason, ev.message)

    def _snapshot(self, now: datetime) -> None:
        """The annotations to publish: the device's totals at ``now`` and the log's claims."""
        out = self.training.annotations(with_step_seconds=self.publish_step_seconds)
        if self.device is not None and self.device.seen(self.uid):
            totals = self.device.totals(self.uid, now)
            if totals is not None:
                out.update({
                    ANN_PROGRESS_AT: rfc3339_millis(totals.at),
                    ANN_STEPPED_SECONDS: f"{totals.stepped_s:.3f}",
                    ANN_INPUT_STALL_SECONDS: f"{totals.input_s:.3f}",
                    ANN_COMM_STALL_SECONDS: f"{totals.comm_s:.3f}",
                    ANN_PEER_WAIT_SECONDS: f"{totals.idle_s:.3f}",
                })
        if not self.publish_step_seconds:
            out.pop(ANN_STEP_SECONDS, None)
        self._progress = out
