"""Pod ranges two reference clusters on one machine never share (refplatform.podranges): claims are flocks, so a
claim ends with its holder however it ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from refplatform.cluster import Cluster, ClusterSpec
from refplatform.podranges import FIRST_OCTET, LAST_OCTET, PodRangeError, claim_octets


def test_two_claims_get_different_octets_and_a_released_one_is_free_again(tmp_path: Path) -> None:
    a = claim_octets(4, directory=tmp_path)
    b = claim_octets(4, directory=tmp_path)
    assert a.octets == (FIRST_OCTET,) and b.octets == (FIRST_OCTET + 1,)
    assert a.cidr(3) == f"127.{FIRST_OCTET}.3.0/24" and b.cidr(0) == f"127.{FIRST_OCTET + 1}.0.0/24"
    a.release()
    assert claim_octets(4, directory=tmp_path).octets == (FIRST_OCTET,)


def test_a_large_cluster_holds_consecutive_octets_and_a_node_past_them_is_refused(tmp_path: Path) -> None:
    held = claim_octets(1, directory=tmp_path, prefer=FIRST_OCTET + 1)  # leaves 10 free, but alone
    big = claim_octets(300, directory=tmp_path)
    assert big.octets == (FIRST_OCTET + 2, FIRST_OCTET + 3) and held.octets == (FIRST_OCTET + 1,)
    assert big.cidr(300) == f"127.{FIRST_OCTET + 3}.44.0/24"
    with pytest.raises(PodRangeError, match="past the 512 pod ranges"):
        big.cidr(512)


def test_a_claim_dies_with_its_holder_and_a_full_machine_says_what_to_do(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from refplatform.podranges import "
                               "claim_octets; print(claim_octets(1, directory=__import__('pathlib').Path(sys.argv[1]))"
                               ".octets[0], flush=True); time.sleep(60)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and int(holder.stdout.readline()) == FIRST_OCTET
        assert claim_octets(1, directory=tmp_path).octets == (FIRST_OCTET + 1,)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    rest = [claim_octets(1, directory=tmp_path) for _ in range(LAST_OCTET - FIRST_OCTET)]  # the dead one's too
    assert FIRST_OCTET in {c.octets[0] for c in rest}
    with pytest.raises(PodRangeError, match="firedrill down"):
        claim_octets(1, directory=tmp_path)


def test_two_clusters_give_their_node_0_different_ranges_and_a_restart_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("refplatform.podranges.lock_dir", lambda: tmp_path / "locks")
    one = Cluster(ClusterSpec(tmp_path / "one", nodes=2))
    two = Cluster(ClusterSpec(tmp_path / "two", nodes=2))
    assert one.pod_cidr("gpu-node-0") == f"127.{FIRST_OCTET}.0.0/24"
    assert two.pod_cidr("gpu-node-0") == f"127.{FIRST_OCTET + 1}.0.0/24"
    one.stop()  # nothing running; its claim goes
    two.stop()
    assert Cluster(ClusterSpec(tmp_path / "two", nodes=2)).pod_cidr("gpu-node-1") == f"127.{FIRST_OCTET + 1}.1.0/24"
