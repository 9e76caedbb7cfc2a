"""Where a baseline's numbers come from, and what a command refuses before it starts anything: a Prometheus source
(two holes unmeasured, never zero), a run archive's whole-run leak report (a run's method, never a baseline's),
and the options of `firedrill baseline` and `firedrill compare`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drills.cli import app
from drills.kinds.baseline.compare import ClauseVerdict, compare, parse_clause
from drills.kinds.baseline.errors import MethodMismatch
from drills.kinds.baseline.method import Method, leak_report_source, window_method
from drills.kinds.baseline.mix import DEFAULT_MIX
from drills.kinds.baseline.observe import Window, observe, source_method
from drills.kinds.baseline.runarchive import _run_window
from drills.kinds.baseline.statement import Observed
from drills.target.leakreport import promql
from drills.target.leakreport.source import PrometheusSource

VALUES = {promql.Series.CAPACITY: 8.0, promql.Series.GPUS_SEEN: 8.0, promql.Series.ALLOCATED: 4.0,
          promql.Series.ACTIVE: 3.0, promql.Series.EFFECTIVE: 1.0, promql.Series.NVIDIA_SMI: 3.5,
          promql.Series.STALLED: 0.5, promql.Series.PENDING: 0.0}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def fake_prometheus(scale: float) -> PrometheusSource:
    """A Prometheus that answers every query_range with a constant per series (``scale`` x the layers)."""
    def fetch(url: str, fields: Mapping[str, str]) -> tuple[int, bytes]:
        series = next(s for s in promql.Series if s.query == fields["query"])
        first, last, step = float(fields["start"]), float(fields["end"]), float(fields["step"])
        n = round((last - first) / step) + 1
        value = VALUES[series] * (scale if series in (promql.Series.ACTIVE, promql.Series.EFFECTIVE) else 1.0)
        doc = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[first + k * step, str(value)] for k in range(n)]}]}}
        return 200, json.dumps(doc).encode()
    return PrometheusSource("http://127.0.0.1:9/prom", fetch=fetch)


def prometheus_observed(name: str, scale: float) -> Observed:
    clock, source = Clock(), fake_prometheus(scale)
    slices, unmeasured = observe(source, Window(clock.now, 60.0, 3), clock=clock, sleep=clock.sleep)
    method = Method(source=source_method(source), workload={"kind": "observed", "description": "prod"},
                    window=window_method(60, 3, 0))
    return Observed(name=name, method=method, slices=tuple(slices), window=("a", "b"), unmeasured=unmeasured)


def test_a_prometheus_baseline_records_its_queries_and_leaves_two_holes_unmeasured_not_zero() -> None:
    before, after = prometheus_observed("the baseline", 1.0), prometheus_observed("RUN", 2.0)
    assert before.method.source["kind"] == "prometheus"
    assert before.method.source["queries"]["effective"] == promql.Series.EFFECTIVE.query
    assert all(s.holes["communication"] is None and s.holes["faultTolerance"] is None for s in before.slices)
    assert "DCGM" in before.unmeasured["communication"]
    c = compare(before, after)
    assert c.row("effective").improvement == pytest.approx(100 * 1.0 / 8.0)  # 1 -> 2 of 8 GPUs
    assert c.row("dataPipeline").improvement == pytest.approx(0.0)
    unmeasured = parse_clause("the communication hole shrinks by at least 0 GPU-hours").judge(c)
    assert unmeasured.verdict is ClauseVerdict.INCONCLUSIVE
    leak = Method(source=leak_report_source(), workload=before.method.workload, window=before.method.window)
    with pytest.raises(MethodMismatch) as caught:
        compare(Observed("the baseline", leak, before.slices, ("a", "b")), after)
    assert caught.value.fields == ("source.kind",)
    assert "source.kind: 'leak-report' in the baseline, 'prometheus' in RUN." in str(caught.value)


def test_a_runs_whole_window_report_has_the_runs_method_and_is_refused_naming_workload_and_window() -> None:
    report = {"apiVersion": "firedrill.dev/v1alpha1", "kind": "LeakReport",
              "window": {"start": "2027-01-15T08:00:00Z", "end": "2027-01-15T08:03:20Z", "seconds": 200.0},
              "capacityGpuHours": 2.0,
              "layers": {n: {"gpuHours": 0.5, "share": 0.25} for n in ("allocated", "active", "effective")},
              "holes": [{"rank": i + 1, "name": n, "words": n, "gpuHours": 0.1, "share": 0.05}
                        for i, n in enumerate(("dataPipeline", "communication", "fragmentation", "faultTolerance"))],
              "largest": "dataPipeline", "summary": "", "tenants": []}
    record = {"features": {"gang.feature": "a" * 64}, "target": {"kind": "embedded", "description": "ref"},
              "leak_report": {"source": {"kind": "apiserver"}, "report": report}}
    run = _run_window(record, Path("reports/x"), "RUN (reports/x)")
    assert run.method.workload["kind"] == "features" and run.method.window["seconds"] == 200.0
    baseline = Observed("the baseline", Method(source=leak_report_source(),
                                               workload={"kind": "mix", "mix": DEFAULT_MIX.to_dict()},
                                               window=window_method(200, 10, 5)), run.slices * 10, ("a", "b"))
    with pytest.raises(MethodMismatch) as caught:
        compare(baseline, run)
    assert {"workload.kind", "window.slices"} <= set(caught.value.fields)
    assert "(window, workload differ)" in str(caught.value)


runner = CliRunner()


@pytest.mark.parametrize("args, says", [
    (["--workload", "prod jobs"], "--workload describes a real cluster's own workload"),
    (["--start", "2027-01-15T00:00:00Z"], "--start observes a past window of a real cluster"),
    (["--window", "10 parsecs"], "--window '10 parsecs': not a duration"),
    (["--kubeconfig", "kc.yaml"], "a real cluster needs --profile FILE"),
    (["--mix", "nowhere.yaml"], "--mix nowhere.yaml: cannot read it"),
    (["--slices", "1"], "Invalid value for '--slices'"),
])
def test_baseline_refuses_bad_options_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             args: list[str], says: str) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["baseline", "--out", "b.dsse.json", *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr, result.stderr
    assert "Starting" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing may be started or written"


def test_a_real_cluster_baseline_must_say_what_its_workload_is(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("name: prod\nflavor: volcano\nnamespace: ml\nqueue: default\ncanary_image: x\n"
                       "fault: {method: kubelet-stop}\nprometheus: {url: 'http://127.0.0.1:9'}\n")
    result = runner.invoke(app, ["baseline", "--profile", str(profile), "--out", str(tmp_path / "b.dsse.json")])
    assert result.exit_code == 2 and "say what it is with --workload" in result.stderr, result.output


def test_compare_refuses_a_clause_it_cannot_judge_and_a_file_that_is_missing(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", "a.json", "b.json", "--clause", "utilization doubles"])
    assert result.exit_code == 2 and "not one Firedrill can judge" in result.stderr, result.output
    result = runner.invoke(app, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert result.exit_code == 2 and "cannot read it" in result.stderr, result.output
