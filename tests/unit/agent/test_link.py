"""The simulated fabric (docs/FABRIC.md): every node's agent is started with its link, tells every container it runs
(``FIREDRILL_LINK_BANDWIDTH``), and the ``slow-link`` defect gives the last working node a quarter of it."""

from __future__ import annotations

import sys
from pathlib import Path

from refplatform.agent.__main__ import build_parser
from refplatform.agent.podenv import PodFacts
from refplatform.agent.runtime import LINK_ENV, process_specs
from refplatform.agent.volumes import NodeDirs
from refplatform.cluster import ClusterSpec
from refplatform.defects import Defect
from refplatform.fabric import LINK_BANDWIDTH, node_link

BASE = ["--api", "https://127.0.0.1:1", "--node", "gpu-node-0", "--data-dir", "/nonexistent"]


def test_the_slow_link_defect_quarters_the_last_working_nodes_link_only() -> None:
    working = ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert node_link("gpu-node-3", working, 10e6, frozenset()) == 10e6
    assert node_link("gpu-node-3", working, 10e6, {Defect.SLOW_LINK}) == 2.5e6
    assert node_link("gpu-node-2", working, 10e6, {Defect.SLOW_LINK}) == 10e6
    honest = ClusterSpec(Path("/nonexistent"), nodes=4, spares=1)
    broken = ClusterSpec(Path("/nonexistent"), nodes=4, spares=1, defects=("slow-link",))
    assert [honest.link_of(n) for n in honest.all_node_names()] == [LINK_BANDWIDTH] * 5
    assert [broken.link_of(n) for n in broken.all_node_names()] == [LINK_BANDWIDTH] * 3 + [LINK_BANDWIDTH / 4,
                                                                                          LINK_BANDWIDTH]


def test_the_agent_takes_its_link_and_tells_every_container(tmp_path: Path) -> None:
    assert build_parser().parse_args(BASE + ["--link-bandwidth", "2.5e6"]).link_bandwidth == 2.5e6
    assert build_parser().parse_args(BASE).link_bandwidth is None
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
           "spec": {"containers": [{"name": "main", "command": [sys.executable, "-c", "pass"]}]}}
    facts = PodFacts.of(pod, "127.10.0.2", "127.0.0.1")
    dirs = NodeDirs(tmp_path, "gpu-node-0")
    (told,) = process_specs(pod, facts, dirs, device_socket=None, link_bandwidth=2.5e6)
    assert told.env[LINK_ENV] == "2.5e+06"
    (untold,) = process_specs(pod, facts, dirs, device_socket=None)
    assert LINK_ENV not in untold.env
