"""The canary's exception root and the deliberate failures under it."""

from __future__ import annotations


class CanaryError(Exception):
    """Root of every deliberate error of the canary; ``main`` turns each into an ``exit`` line and a code."""


class UsageError(CanaryError):
    """A bad option or environment variable; the message names it.  Exit code 2."""


class Terminated(CanaryError):
    """SIGTERM arrived; raised by the next wait or sleep.  Exit code 143."""


class RendezvousError(CanaryError):
    """The world did not come together within ``--rendezvous-timeout``."""


class PeerTimeout(CanaryError):
    """A collective waited ``--peer-timeout`` seconds without completing (a lost or silent peer)."""


class ProtocolError(CanaryError):
    """A peer sent something the canary's wire protocol does not allow (wrong step, bad frame, wrong sum)."""


class CheckpointError(CanaryError):
    """A checkpoint could not be written."""


class DeviceLost(CanaryError):
    """The GPU under the rank failed (the device reported an Xid, SIGUSR1 from the simulated device): the next
    call to it fails, as a CUDA call does on a GPU that fell off the bus or took an uncontained ECC error."""
