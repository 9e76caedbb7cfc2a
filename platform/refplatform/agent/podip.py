"""Pod IPs: each pod its own loopback address, from the node's pod range.

Linux routes all of ``127.0.0.0/8`` to the loopback interface, so a pod can
bind its own address without any network setup, and two pods on one node can
both listen on the same port.  Each agent hands out the host addresses of its
``--pod-cidr`` (``refplatform.cluster`` gives node *i* ``127.<k>.<i>.0/24``, ``k`` a
second octet no other reference cluster on the machine holds (``refplatform.podranges``), and
the Node's ``spec.podCIDR`` says so), skipping the first one (the node's own,
as a CNI bridge keeps its gateway), in turn like host-local IPAM: an address is
never held by two pods, and one released comes back only after every other
free one was used.  A pod keeps its address across container restarts and
agent restarts (the agent reclaims the ``status.podIP`` a pod reports).

A range outside ``127.0.0.0/8`` is accepted only where the whole range is local
to the agent's network namespace (its first and last host addresses can be
bound): inside a namespace a test created, with the range on that namespace's
``lo`` (``ip addr add 10.244.0.1/16 dev lo``), pods get addresses upstream's
EndpointSlice controller accepts, and nothing outside the namespace is ever
addressed.  A range some other machine could own is refused.

Without ``--pod-cidr`` the range comes from the node name:
``127.<64 + h[0] % 64>.<h[1]>.0/24`` where ``h`` is the SHA-256 of the name
(:func:`default_pod_cidr`), so it stays clear of ``127.0.0.0/16`` and of the
ranges the cluster hands out.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Callable

from refplatform.agent.errors import AgentError

__all__ = ["PodAddressError", "PodAddressPool", "address_is_local", "default_pod_cidr", "parse_pod_cidr"]

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


class PodAddressError(AgentError):
    """A bad pod range, or no free address in it."""


def address_is_local(address: str) -> bool:
    """Whether this network namespace owns ``address`` (a socket can be bound to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def parse_pod_cidr(raw: str, is_local: Callable[[str], bool] = address_is_local) -> ipaddress.IPv4Network:
    """A pod range: an IPv4 network with room for at least two pods, inside ``127.0.0.0/8`` or local."""
    try:
        net = ipaddress.ip_network(raw.strip(), strict=True)
    except ValueError as err:
        raise PodAddressError(f"--pod-cidr {raw!r} is not a network address with a prefix ({err})") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise PodAddressError(f"--pod-cidr {raw!r} is not IPv4")
    if not net.subnet_of(LOOPBACK) and net.prefixlen <= 29:
        hosts = (net.network_address + 1, net.broadcast_address - 1)
        if not all(is_local(str(h)) for h in hosts):
            raise PodAddressError(
                f"--pod-cidr {raw!r} lies outside 127.0.0.0/8 and is not local to this network namespace, so "
                "pods could get addresses another machine owns; use a loopback range, or run the agent in a "
                f"network namespace you own with the range on its lo (ip addr add {hosts[0]}/{net.prefixlen} "
                "dev lo)")
    if net.prefixlen > 29:
        raise PodAddressError(f"--pod-cidr {raw!r} is too small: use a prefix of /29 or shorter")
    if ipaddress.IPv4Address("127.0.0.1") in net:
        raise PodAddressError(f"--pod-cidr {raw!r} contains 127.0.0.1, the nodes' own address")
    return net


def default_pod_cidr(node: str) -> str:
    """The node's range when none is given: derived from its name (documented in the module)."""
    h = hashlib.sha256(node.encode()).digest()
    return f"127.{64 + h[0] % 64}.{h[1]}.0/24"


class PodAddressPool:
    """The addresses of one node's pods, by pod uid.  Not thread-safe: the pod sync thread owns it."""

    def __init__(self, cidr: str, is_local: Callable[[str], bool] = address_is_local) -> None:
        self.network = parse_pod_cidr(cidr, is_local)
        self.cidr = str(self.network)
        hosts = list(self.network.hosts())
        self._addresses = [str(a) for a in hosts[1:]]  # the first host is the node's own
        self._index = {a: i for i, a in enumerate(self._addresses)}
        self._by_uid: dict[str, str] = {}
        self._holder: dict[str, str] = {}
        self._cursor = 0  # where the next search starts: just after the last address handed out

    @property
    def size(self) -> int:
        return len(self._addresses)

    def address_of(self, uid: str) -> str | None:
        return self._by_uid.get(uid)

    def holds(self) -> dict[str, str]:
        """Address by pod uid, for every address in use."""
        return dict(self._by_uid)

    def claim(self, uid: str, address: str) -> bool:
        """Give ``uid`` the address it already had (an agent restart); False if not ours or held by another."""
        if address not in self._index:
            return False
        holder = self._holder.get(address)
        if holder is not None:
            return holder == uid
        if uid in self._by_uid:
            return False
        self._by_uid[uid] = address
        self._holder[address] = uid
        return True

    def allocate(self, uid: str) -> str:
        """``uid``'s address: the one it holds, else the next free one after the last handed out."""
        held = self._by_uid.get(uid)
        if held is not None:
            return held
        n = len(self._addresses)
        for k in range(n):
            i = (self._cursor + k) % n
            address = self._addresses[i]
            if address not in self._holder:
                self._by_uid[uid] = address
                self._holder[address] = uid
                self._cursor = (i + 1) % n
                return address
        raise PodAddressError(f"no free pod address in {self.cidr} ({n} addresses, all held)")

    def release(self, uid: str) -> None:
        """``uid`` no longer runs: its address may go to another pod (after the others)."""
        address = self._by_uid.pop(uid, None)
        if address is not None:
            self._holder.pop(address, None)
