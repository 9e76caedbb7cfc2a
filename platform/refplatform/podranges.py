"""Which pod addresses a reference cluster may hand out, so that two of them on one machine never share one.

Each node's pods get loopback addresses from the node's ``/24`` (:mod:`refplatform.agent.podip`).  Two embedded
platforms at once (``firedrill run --parallel``, the defect zoo's runs side by side, a test beside ``firedrill
up``) used to give their node *i* the same ``127.10.<i>.0/24``: the inference replicas of both wanted the same
address and port, and the one that came second could not bind.

A cluster therefore claims whole second octets of ``127.10.0.0`` to ``127.63.255.255`` for itself
(:func:`claim_octets`): octet *k* is held by an exclusive ``flock`` on ``<tmp>/firedrill-pod-ranges/127.<k>.lock``.
The kernel drops the lock when its holder closes the file or dies, however it dies, so a harness killed mid-drill
leaves no stale claim to clean up.  ``127.64.0.0/10`` stays for an agent started without ``--pod-cidr``.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from refplatform.errors import RefPlatformError

__all__ = ["FIRST_OCTET", "LAST_OCTET", "OctetClaim", "PodRangeError", "claim_octets"]

FIRST_OCTET = 10
LAST_OCTET = 63
"""The second octets clusters claim from (``127.64.0.0/10`` is :func:`refplatform.agent.podip.default_pod_cidr`'s)."""
NODES_PER_OCTET = 256


class PodRangeError(RefPlatformError):
    """No run of free second octets was left for a cluster's nodes."""


@dataclass
class OctetClaim:
    """Second octets held for one cluster: node *i* gets ``127.<octets[i // 256]>.<i % 256>.0/24``."""

    octets: tuple[int, ...]
    _files: list[int] = field(default_factory=list, repr=False)

    def cidr(self, index: int) -> str:
        octet = self.octets[index // NODES_PER_OCTET] if index // NODES_PER_OCTET < len(self.octets) else None
        if octet is None:
            raise PodRangeError(f"node {index} is past the {len(self.octets) * NODES_PER_OCTET} pod ranges this "
                                "cluster claimed; start it with fewer nodes")
        return f"127.{octet}.{index % NODES_PER_OCTET}.0/24"

    def release(self) -> None:
        """Let another cluster have the octets (closing the files drops their locks)."""
        for fd in self._files:
            os.close(fd)
        self._files.clear()


def lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / "firedrill-pod-ranges"


def _try_lock(directory: Path, octet: int) -> int | None:
    fd = os.open(directory / f"127.{octet}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim_octets(nodes: int, prefer: int | None = None, directory: Path | None = None) -> OctetClaim:
    """Hold enough consecutive free second octets for ``nodes`` nodes (and a few started beyond the spec),
    trying ``prefer`` first (the octet this cluster's data directory had before a restart)."""
    need = max(1, -(-(nodes + 16) // NODES_PER_OCTET))
    directory = directory or lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    starts = list(range(FIRST_OCTET, LAST_OCTET - need + 2))
    if prefer in starts:
        starts.remove(prefer)
        starts.insert(0, prefer)
    for start in starts:
        held: list[int] = []
        for octet in range(start, start + need):
            fd = _try_lock(directory, octet)
            if fd is None:
                break
            held.append(fd)
        if len(held) == need:
            return OctetClaim(tuple(range(start, start + need)), held)
        for fd in held:
            os.close(fd)
    raise PodRangeError(f"every pod range 127.{FIRST_OCTET}-{LAST_OCTET}.x.x is held by another reference cluster "
                        f"on this machine ({directory}); stop one of them (firedrill down) and start again")
