"""Framework mechanics: statements, configuration, determinism, custom plugins, purity."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import refplatform.core as core
from refplatform.core import (
    ConfigError,
    ExtensionPoint,
    Plugin,
    PluginSpec,
    Resources,
    SchedulerConfig,
    Session,
    Snapshot,
    SnapshotError,
    Status,
    StatusCode,
    TieBreak,
    register_plugin,
    schedule,
)
from refplatform.core.jobs import TaskStatus
from refplatform.core.statement import Statement

from .schedcase import gang, node, pod


def _snapshot(**kw) -> Snapshot:
    groups, pods = [], []
    for g, ps in kw.pop("gangs", []):
        groups.append(g)
        pods.extend(ps)
    return Snapshot(tuple(kw.pop("nodes")), tuple(pods + kw.pop("pods", [])), tuple(groups), (), kw.pop("now", 0.0))


def test_statement_discard_restores_state_and_queue_accounting() -> None:
    ssn = Session(_snapshot(nodes=[node("n0"), node("n1")], gangs=[gang("a", 2, gpus=4)]), SchedulerConfig())
    before = (ssn.state.gpu_free.copy(), ssn.state.cpu_free.copy(), ssn.state.full_free.copy())
    proportion = next(p for p in ssn.plugins if p.name == "proportion")
    job = ssn.jobs["default/a"]
    stmt = Statement(ssn)
    for i, task in enumerate(job.pending()):
        stmt.allocate(task, i, (0, 1, 2, 3))
    assert proportion.allocated["default"][2] == 8000
    assert all(t.status is TaskStatus.ALLOCATED for t in job.tasks)
    stmt.discard()
    assert all(t.status is TaskStatus.PENDING for t in job.tasks)
    assert proportion.allocated["default"][2] == 0
    np.testing.assert_array_equal(before[0], ssn.state.gpu_free)
    np.testing.assert_array_equal(before[1], ssn.state.cpu_free)
    np.testing.assert_array_equal(before[2], ssn.state.full_free)


def test_statement_commit_turns_allocations_into_binds() -> None:
    ssn = Session(_snapshot(nodes=[node("n0")], gangs=[gang("a", 1, gpus=2)]), SchedulerConfig())
    task = ssn.jobs["default/a"].pending()[0]
    stmt = Statement(ssn)
    stmt.allocate(task, 0, (3, 5))
    stmt.commit()
    assert task.status is TaskStatus.BOUND
    assert [(b.node, b.gpu_indices) for b in ssn.binds] == [("n0", (3, 5))]


@pytest.mark.parametrize("config", [
    lambda: SchedulerConfig(placement="worst-fit"),
    lambda: SchedulerConfig(actions=("allocate", "allocate")),
    lambda: SchedulerConfig(starvation_seconds=-1),
])
def test_bad_config_values_are_rejected(config) -> None:
    with pytest.raises(ConfigError):
        config()


@pytest.mark.parametrize("config", [
    SchedulerConfig(plugins=(PluginSpec("nope"),)),
    SchedulerConfig(actions=("enqueue", "shuffle")),
])
def test_unknown_names_are_rejected_when_a_session_opens(config) -> None:
    with pytest.raises(ConfigError, match="unknown"):
        schedule(_snapshot(nodes=[node("n0")]), config)


def test_fgd_without_any_pods_or_distribution_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        core.Placer([node("n0")], SchedulerConfig(placement="fgd", plugins=core.PLACER_PLUGINS))


def test_errors_derive_from_the_platform_root() -> None:
    from refplatform.errors import RefPlatformError
    assert issubclass(ConfigError, RefPlatformError) and issubclass(SnapshotError, RefPlatformError)
    with pytest.raises(SnapshotError):
        Resources(gpu_milli=1000)
    with pytest.raises(SnapshotError):
        Resources(gpus=1, gpu_milli=500)
    with pytest.raises(SnapshotError):
        schedule(_snapshot(nodes=[node("n0")], pods=[pod("p"), pod("p")]))


def test_random_tie_break_is_deterministic_for_a_seed() -> None:
    snap = _snapshot(nodes=[node(f"n{i}") for i in range(16)], pods=[pod(f"p{i}", gpus=1) for i in range(8)])
    runs = {tuple(sorted(schedule(snap, SchedulerConfig(seed=7)).bind_map().items())) for _ in range(3)}
    assert len(runs) == 1
    other = schedule(snap, SchedulerConfig(seed=8)).bind_map()
    assert sorted(other) == sorted(dict(next(iter(runs))))


def test_decisions_record_the_injected_clock() -> None:
    d = schedule(_snapshot(nodes=[node("n0")], gangs=[gang("a", 2, gpus=8)], now=1234.5))
    assert d.now == 1234.5
    assert d.pod_group("default/a").conditions[0].transition_time == 1234.5


@register_plugin
class _AvoidNodeZero(Plugin):
    """A custom plugin: a filter at FILTER and a permit vote at PERMIT."""

    name = "test-avoid-n0"

    def on_session_open(self, ssn: Session) -> None:
        class Filter:
            name = "AvoidNodeZero"

            def mask(self, task, state):
                return np.array([n != "n0" for n in state.names])

            def explain(self, task, state):
                return [("node(s) named n0", ~self.mask(task, state))]

        ssn.add_fn(ExtensionPoint.FILTER, self.name, Filter())
        ssn.add_fn(ExtensionPoint.PERMIT, self.name,
                   lambda job: Status(StatusCode.WAIT, ("vetoed",), self.name) if job.name == "veto" else Status())


def test_custom_plugins_register_at_named_points() -> None:
    config = SchedulerConfig(tie_break=TieBreak.FIRST,
                             plugins=SchedulerConfig().plugins + (PluginSpec("test-avoid-n0"),))
    d = schedule(_snapshot(nodes=[node("n0"), node("n1")], gangs=[gang("a", 1), gang("veto", 1)],
                           pods=[pod("p", gpus=8)]), config)
    assert d.bind_map() == {"default/a-0": "n1"}
    assert "1 node(s) named n0" in d.failure_messages()["default/p"]


FORBIDDEN = {"time", "datetime", "sqlite3", "socket", "http", "urllib", "httpx", "requests", "asyncio",
             "subprocess", "threading", "random", "starlette", "uvicorn", "refplatform.store", "refplatform.api",
             "refplatform.agent", "refplatform.controllers"}


def test_core_does_no_io_and_reads_no_clock() -> None:
    root = Path(core.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for item in ast.walk(tree):
            names = []
            if isinstance(item, ast.Import):
                names = [a.name for a in item.names]
            elif isinstance(item, ast.ImportFrom) and item.module:
                names = [item.module]
            elif isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id in ("open", "print"):
                offenders.append(f"{path.name}: {item.func.id}()")
            for name in names:
                if name.split(".")[0] in FORBIDDEN or any(name.startswith(f + ".") or name == f for f in FORBIDDEN):
                    offenders.append(f"{path.name}: import {name}")
    assert not offenders, offenders
