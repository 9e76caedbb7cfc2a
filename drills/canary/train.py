"""The training loop of one rank: resume, rendezvous, then steps of input, compute and all-reduce.

A step N is: wait ``--input-seconds`` (device ``input``; plus the driver's
input delay), compute ``--compute-seconds`` (device ``compute``; divided by the
speed of the rank's slowest GPU, :meth:`Device.speed`), then the all-reduce with
``--comm-seconds`` of added transfer time (device ``comm``).  The ``step``
line carries the canary's own monotonic measurement of each part, and (in a
world of more than one) ``recv``: per peer, the bytes and seconds of how its
frame of the all-reduce reached this rank (:attr:`Collective.arrivals`).  Rank 0
then writes checkpoint N when N is a multiple of ``--checkpoint-every`` (the
write falls between two steps and is in neither's ``wall_s``).

A checkpoint write is logged ``checkpoint-begin`` before it starts and
``checkpoint`` once it is durable; in between the device state is
``checkpoint``.  It goes to storage as the node's driver file says the storage
is (:meth:`Device.storage`): in chunks over ``--checkpoint-seconds``, waiting
while the storage is stalled, straight under the final name where the storage
does not keep the rename promise.  Its waits are SIGTERM's to cut short: a
periodic write SIGTERM interrupts is abandoned (no ``checkpoint`` line; an
atomic write leaves no file, a non-atomic one the part it wrote).

SIGUSR2 (the GPU stuck in a kernel) makes the current or next compute never end
(:meth:`Interrupts.compute`): the rank says nothing more and its peers stall in
the all-reduce, until SIGTERM.

With ``--checkpoint-on-sigterm``, a SIGTERM (a preemption's graceful delete)
makes rank 0 checkpoint the last completed step before the rank exits 143,
unless that step is already durable (its periodic checkpoint, or the one it
resumed from).  The step is complete on every rank (its all-reduce returned),
so the checkpoint is one the whole job agrees on; the other ranks write nothing,
as always.  That write is paced and honours the storage like any other, but
SIGTERM does not cut its waits short (:meth:`Interrupts.pause`): it is SIGTERM's
own work, which only the grace period's SIGKILL ends.  A periodic write SIGTERM
abandoned is written again this way (its step is not durable).
"""

from __future__ import annotations

import enum
import os
import time
import zlib
from collections.abc import Callable

from drills.canary.checkpoint import Resume, Storage, checkpoint_name, find_resume, prune, write_checkpoint
from drills.canary.collective import Collective, contribution, reduce_sum
from drills.canary.config import Config
from drills.canary.device import Device, DeviceState
from drills.canary.errors import ProtocolError, Terminated
from drills.canary.interrupts import Interrupts
from drills.canary.log import Event, EventLog, rfc3339
from drills.canary.rendezvous import World, rendezvous

__all__ = ["ExitReason", "Trainer"]


class ExitReason(enum.Enum):
    """The ``reason`` of the ``exit`` line."""

    COMPLETE = "complete"
    """``--steps-total`` reached: exit 0."""
    SIGTERM = "sigterm"
    """Stopped by SIGTERM: exit 143."""
    PEER_TIMEOUT = "peer-timeout"
    """A collective waited ``--peer-timeout`` seconds: exit 1."""
    ERROR = "error"
    """Anything else (rendezvous timeout, checkpoint write, protocol): exit 1."""


class Trainer:
    """One rank's run; ``last_step`` is the last step it completed (or resumed from), None before that."""

    def __init__(self, cfg: Config, log: EventLog, device: Device, interrupts: Interrupts,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.cfg, self.log, self.device, self.interrupts = cfg, log, device, interrupts
        self.clock, self.wall = clock, wall
        self.last_step: int | None = None
        self.world: World | None = None
        self._accumulator = 0
        self._durable_step: int | None = None
        """The newest step known to be in a checkpoint (written or resumed from)."""

    def run(self) -> None:
        try:
            self._run()
        except Terminated:
            if self.cfg.checkpoint_on_sigterm:
                self._checkpoint_on_sigterm()
            raise

    def _checkpoint_on_sigterm(self) -> None:
        cfg, step = self.cfg, self.last_step
        if cfg.rank != 0 or not cfg.checkpoints or step is None or step == 0 or step == self._durable_step:
            return
        self._checkpoint(step, trigger="sigterm")

    def _checkpoint(self, step: int, trigger: str | None = None) -> None:
        """Write checkpoint ``step`` between its ``checkpoint-begin`` and ``checkpoint`` lines, device state
        ``checkpoint``; a periodic one (``trigger`` None) waits through :meth:`Interrupts.sleep`, the one on SIGTERM
        through :meth:`Interrupts.pause`."""
        cfg = self.cfg
        assert cfg.checkpoint_dir is not None
        extra = {} if trigger is None else {"trigger": trigger}
        self.log.emit(Event.CHECKPOINT_BEGIN, step=step, file=checkpoint_name(step), **extra)
        self.device.send(DeviceState.CHECKPOINT)
        storage = self._storage(self.interrupts.sleep if trigger is None else self.interrupts.pause)
        written = write_checkpoint(cfg.checkpoint_dir, step, cfg.world_size, cfg.generation,
                                   {"accumulator": self._accumulator}, rfc3339(self.wall()), storage)
        self._durable_step = step
        self.log.emit(Event.CHECKPOINT, step=step, file=written.file, digest=written.digest, **extra)
        prune(cfg.checkpoint_dir, cfg.keep_checkpoints)

    def _storage(self, sleep: Callable[[float], None]) -> Storage:
        """The checkpoint storage of one write as the node's driver file says it is: its rename promise read now,
        its stall read afresh before every chunk; ``--checkpoint-seconds`` its pace, ``sleep`` its waits."""
        device, wall = self.device, self.wall
        return Storage(seconds=self.cfg.checkpoint_seconds, atomic=device.storage().atomic_rename,
                       stall_left=lambda: device.storage().stall_left(wall()), sleep=sleep)

    def _run(self) -> None:
        cfg = self.cfg
        self.log.emit(Event.START, pid=os.getpid(), config=cfg.as_log(),
                      gpus=None if cfg.gpus is None else list(cfg.gpus))
        self.device.send(DeviceState.IDLE)
        resume = find_resume(cfg.checkpoint_dir) if cfg.rank == 0 else Resume.fresh()
        self.world = world = rendezvous(cfg, resume, self.interrupts, self.clock)
        self.log.emit(Event.RENDEZVOUS, master=world.master, seconds=round(world.seconds, 6))
        resume = world.resume
        self.log.emit(Event.RESUMED, from_step=resume.from_step, checkpoint=resume.checkpoint,
                      skipped=resume.skipped)
        self.last_step = step = resume.from_step
        if resume.checkpoint is not None:
            self._durable_step = resume.from_step
        accumulator = resume.state.get("accumulator", 0)
        accumulator = accumulator if isinstance(accumulator, int) else 0
        self._accumulator = accumulator
        collective = Collective(world, cfg.rank, cfg.world_size, self.log, self.device, self.interrupts,
                                cfg.stall_after, cfg.peer_timeout, self.clock)
        moved = collective.moved_bytes(cfg.payload_bytes)
        while cfg.steps_total == 0 or step < cfg.steps_total:
            n = step + 1
            t0 = self.clock()
            speed, input_delay = self.device.speed()  # a throttled GPU, a slow input pipeline (the driver's word)
            self.device.send(DeviceState.INPUT)
            self.interrupts.sleep(cfg.input_seconds + input_delay)
            t1 = self.clock()
            self.device.send(DeviceState.COMPUTE)
            mine = contribution(cfg.rank, n, cfg.payload_bytes)
            self.interrupts.compute(cfg.compute_seconds / speed)  # a hung GPU (SIGUSR2): never returns
            t2 = self.clock()
            self.device.send(DeviceState.COMM, moved)
            self.interrupts.sleep(cfg.comm_seconds)
            result = collective.all_reduce(n, mine)
            t3 = self.clock()
            if cfg.world_size > 1 and result != reduce_sum([contribution(r, n, cfg.payload_bytes)
                                                             for r in range(cfg.world_size)]):
                raise ProtocolError(f"the all-reduce of step {n} returned a wrong sum")
            accumulator = zlib.crc32(result, accumulator)
            self._accumulator = accumulator
            self.last_step = step = n
            links = {"recv": {str(peer): [a.bytes, round(a.seconds, 6)] for peer, a in
                              sorted(collective.arrivals.items())}} if cfg.world_size > 1 else {}
            self.log.emit(Event.STEP, step=n, input_s=round(t1 - t0, 6), compute_s=round(t2 - t1, 6),
                          comm_s=round(t3 - t2, 6), wall_s=round(t3 - t0, 6), **links)
            if cfg.rank == 0 and cfg.checkpoints and n % cfg.checkpoint_every == 0:
                self._checkpoint(n)

    def close(self) -> None:
        if self.world is not None:
            self.world.close()
