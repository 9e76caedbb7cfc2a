"""Pod IPs: loopback addresses from the node's range, never held twice (pure)."""

from __future__ import annotations

import ipaddress

import pytest

from refplatform.agent.podip import PodAddressError, PodAddressPool, default_pod_cidr, parse_pod_cidr


def test_addresses_are_distinct_skip_the_nodes_own_and_stay_with_their_pod() -> None:
    pool = PodAddressPool("127.10.3.0/24")
    a, b = pool.allocate("a"), pool.allocate("b")
    assert (a, b) == ("127.10.3.2", "127.10.3.3")  # .0 network, .1 the node's own
    assert pool.allocate("a") == a and pool.size == 253


def test_a_released_address_comes_back_only_after_every_other_free_one() -> None:
    pool = PodAddressPool("127.10.0.0/29")  # hosts .1-.6; pods get .2-.6
    first = [pool.allocate(f"p{i}") for i in range(3)]
    pool.release("p0")
    later = [pool.allocate(f"q{i}") for i in range(2)]
    assert first == ["127.10.0.2", "127.10.0.3", "127.10.0.4"] and later == ["127.10.0.5", "127.10.0.6"]
    assert pool.allocate("r") == "127.10.0.2"  # the released one, now that nothing else is free
    with pytest.raises(PodAddressError, match="no free pod address in 127.10.0.0/29"):
        pool.allocate("s")


def test_claim_keeps_an_address_across_an_agent_restart_and_refuses_conflicts() -> None:
    pool = PodAddressPool("127.10.0.0/24")
    assert pool.claim("old", "127.10.0.9")
    assert not pool.claim("other", "127.10.0.9")           # held by another pod
    assert not pool.claim("x", "127.1.2.3")                # not in this range (an older scheme)
    assert pool.allocate("old") == "127.10.0.9"
    assert "127.10.0.9" not in {pool.allocate(f"n{i}") for i in range(200)}


@pytest.mark.parametrize(("raw", "message"), [
    ("10.0.0.0/24", "outside 127.0.0.0/8 and is not local to this network namespace"),
    ("127.10.0.0/30", "too small"),
    ("127.0.0.0/24", "contains 127.0.0.1"),
    ("127.10.0.5/24", "not a network address"),
    ("nonsense", "not a network address"),
])
def test_bad_ranges_are_refused(raw: str, message: str) -> None:
    with pytest.raises(PodAddressError, match=message):
        parse_pod_cidr(raw)


def test_a_range_outside_loopback_is_accepted_only_where_all_of_it_is_local() -> None:
    """Inside a network namespace a test owns, with the range on its lo; a range partly elsewhere is refused."""
    asked: list[str] = []

    def local(address: str) -> bool:
        asked.append(address)
        return address.startswith("10.244.")
    assert str(parse_pod_cidr("10.244.3.0/24", is_local=local)) == "10.244.3.0/24"
    assert asked == ["10.244.3.1", "10.244.3.254"]
    with pytest.raises(PodAddressError, match="ip addr add 10.244.0.1/15 dev lo"):
        parse_pod_cidr("10.244.0.0/15", is_local=local)  # its last addresses are not local
    assert PodAddressPool("10.244.3.0/24", is_local=local).allocate("a") == "10.244.3.2"


def test_the_default_range_is_derived_from_the_node_name() -> None:
    cidrs = {default_pod_cidr(f"gpu-node-{i}") for i in range(20)}
    assert default_pod_cidr("gpu-node-0") == default_pod_cidr("gpu-node-0")
    assert len(cidrs) > 15
    for c in cidrs:
        net = parse_pod_cidr(c)
        assert net.prefixlen == 24 and net.subnet_of(ipaddress.IPv4Network("127.64.0.0/10"))
