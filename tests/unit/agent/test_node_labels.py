"""``--node-labels``: a node registers with its rack and block (docs/TOPOLOGY.md), as a kubelet's flag of that name;
the embedded cluster racks its nodes two to a rack."""

from __future__ import annotations

from pathlib import Path

import pytest

from refplatform.agent.__main__ import build_parser
from refplatform.agent.gpus import select_inventory
from refplatform.agent.node import NodeConfig, node_labels
from refplatform.cluster import BLOCK_LABEL, RACK_LABEL, ClusterSpec

BASE = ["--api", "https://127.0.0.1:1", "--node", "gpu-node-0", "--data-dir", "/nonexistent"]


def test_the_flag_takes_comma_separated_labels_and_repeats() -> None:
    args = build_parser().parse_args(BASE + ["--node-labels", f"{RACK_LABEL}=rack-0,{BLOCK_LABEL}=block-0",
                                             "--node-labels", "team=a"])
    assert args.node_labels == [{RACK_LABEL: "rack-0", BLOCK_LABEL: "block-0"}, {"team": "a"}]


@pytest.mark.parametrize("bad", ["rack", "bad key=1", f"{RACK_LABEL}=not a value", "=x"])
def test_a_malformed_label_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(BASE + ["--node-labels", bad])
    assert exc.value.code == 2 and "KEY=VALUE" in capsys.readouterr().err


def test_the_node_carries_them_and_its_own_facts_win() -> None:
    config = NodeConfig("gpu-node-0", select_inventory("H100-80GB", 8, force_simulated=True),
                        extra_labels={RACK_LABEL: "rack-0", "kubernetes.io/hostname": "elsewhere"})
    labels = node_labels(config)
    assert labels[RACK_LABEL] == "rack-0" and labels["kubernetes.io/hostname"] == "gpu-node-0"


def test_the_embedded_cluster_racks_nodes_two_to_a_rack_spares_included() -> None:
    spec = ClusterSpec(Path("/nonexistent"), nodes=4, spares=1)
    racks = {name: spec.topology_labels(name) for name in spec.all_node_names()}
    assert [r[RACK_LABEL] for r in racks.values()] == ["rack-0", "rack-0", "rack-1", "rack-1", "rack-2"]
    assert [r[BLOCK_LABEL] for r in racks.values()] == ["block-0"] * 4 + ["block-1"]
    assert spec.topology_labels("partitioned-node") == {}
    assert ClusterSpec(Path("/nonexistent"), nodes_per_rack=0).topology_labels("gpu-node-0") == {}
