"""The ``stale-metrics`` defect (docs/DEFECTS.md): the agent's exporter keeps answering its first scrape, 200 and
well-formed, while the GPUs it describes change; the honest exporter follows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from refplatform.agent.metrics import GpuCollector, GpuMetrics

from .test_metrics import NODE, TRAINING, Env, by_gpu, parse


@pytest.mark.parametrize("stale", [False, True], ids=["honest", "stale-metrics"])
def test_the_stale_exporter_answers_its_first_scrape_forever(tmp_path: Path, stale: bool) -> None:
    env = Env(tmp_path, gpus=2, config={"mode": "none"})
    env.metrics = GpuMetrics(GpuCollector(NODE, env.sync, 2, "NVIDIA-H200", "H200"), stale=stale)
    first = env.metrics.render()
    assert by_gpu(parse(first.decode())["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": 0.0, "1": 0.0}
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, TRAINING)
    env.step()
    env.step()
    env.inject([{"id": "a", "gpu": 1, "instance": None, "xid": 43}])
    env.step()
    later = env.scrape()
    if stale:
        assert env.metrics.render() == first
        assert by_gpu(later["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": 0.0, "1": 0.0}
        assert by_gpu(later["DCGM_FI_DEV_XID_ERRORS"]) == {"0": 0.0, "1": 0.0}
    else:
        assert by_gpu(later["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) == {"0": 1.0, "1": 0.0}
        assert by_gpu(later["DCGM_FI_DEV_XID_ERRORS"]) == {"0": 0.0, "1": 43.0}


@pytest.mark.parametrize("misattribute", [False, True], ids=["honest", "misattributed-metrics"])
def test_the_misattributing_exporter_reports_a_gpus_load_under_the_next_gpus_uuid(tmp_path: Path,
                                                                                 misattribute: bool) -> None:
    env = Env(tmp_path, gpus=2, config={"mode": "none"})
    collector = GpuCollector(NODE, env.sync, 2, "NVIDIA-H200", "H200", misattribute=misattribute)
    env.metrics = GpuMetrics(collector)
    env.add_pod("rank-0", {"nvidia.com/gpu": "1"}, TRAINING)  # on GPU 0
    env.step()
    env.step()
    by_uuid = {labels["UUID"]: v for labels, v in env.scrape()["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
    busy, idle = collector.gpu_uuid(0), collector.gpu_uuid(1)
    assert by_uuid == ({busy: 0.0, idle: 1.0} if misattribute else {busy: 1.0, idle: 0.0})
