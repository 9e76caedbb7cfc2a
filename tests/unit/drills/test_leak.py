"""The leak drill's pure parts: the report's shape, the truth arithmetic, the judge, the sources, the profile."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from drills.workloads.canarylog import StallTotals

from drills.kinds.leak.drill import unschedulable
from drills.kinds.leak.judge import judge_naming, judge_size
from drills.kinds.leak.truth import (
    Truth, fault_truth, fragmentation_truth, measured_stall_truth, stall_truth,
)
from drills.kube.timeline import parse_time
from drills.target.leakreport.model import Hole, LeakReading, ReportMalformed, ReportUnavailable
from drills.target.leakreport.source import ApiServerSource, PrometheusSource, UrlSource, rfc3339, source_for
from drills.target.profile import LeakReportSettings, ProfileError, load_profile, reference_profile

REPO = Path(__file__).resolve().parents[3]


def example_report() -> dict[str, Any]:
    """The contract's own example (docs/LEAK_REPORT.md), so the reader and the contract cannot drift."""
    text = (REPO / "docs" / "LEAK_REPORT.md").read_text()
    block = text.split("<!-- example-output -->", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    return json.loads(block)


# ------------------------------------------------------------------ holes and the report's shape
@pytest.mark.parametrize("text, hole", [("data pipeline", Hole.DATA_PIPELINE), ("dataPipeline", Hole.DATA_PIPELINE),
                                        ("Communication", Hole.COMMUNICATION), ("fragmentation", Hole.FRAGMENTATION),
                                        ("fault  tolerance", Hole.FAULT_TOLERANCE),
                                        ("faultTolerance", Hole.FAULT_TOLERANCE)])
def test_holes_parse_from_words_or_contract_names(text: str, hole: Hole) -> None:
    assert Hole.parse(text) is hole


def test_an_unknown_hole_lists_the_four() -> None:
    with pytest.raises(ValueError, match="data pipeline, communication, fragmentation, fault tolerance"):
        Hole.parse("storage")


def test_the_contract_example_reads() -> None:
    reading = LeakReading.parse(example_report(), "example")
    assert reading.largest == "fragmentation" and reading.largest_words() == "fragmentation"
    assert reading.gpu_hours(Hole.FRAGMENTATION) == 3.0
    assert reading.gpu_hours(Hole.FAULT_TOLERANCE) == pytest.approx(0.666667)
    assert reading.layers["allocated"] == (5.5, 0.392857)
    assert [n for n, _, _ in reading.holes] == ["fragmentation", "dataPipeline", "faultTolerance", "communication"]
    assert reading.raw["summary"].startswith("The largest hole is fragmentation")


def test_unknown_fields_are_ignored() -> None:
    doc = example_report()
    doc["futureField"] = {"x": 1}
    doc["holes"][0]["confidence"] = 0.9
    assert LeakReading.parse(doc, "example").largest == "fragmentation"


@pytest.mark.parametrize("mutate, problem", [
    (lambda d: d.update(apiVersion="v2"), "apiVersion is 'v2'"),
    (lambda d: d.update(kind="Other"), "kind is 'Other'"),
    (lambda d: d["layers"].pop("active"), "layers.active needs numbers"),
    (lambda d: d.update(holes="many"), "holes is not a list"),
    (lambda d: d["holes"].pop(), "holes lacks communication"),
    (lambda d: d["holes"][0].update(name="storage"), "holes[0] needs a name"),
    (lambda d: d.update(largest="storage"), "largest is 'storage'"),
    (lambda d: d.update(capacityGpuHours="14"), "capacityGpuHours is not a number"),
])
def test_a_report_that_breaks_the_contract_is_named(mutate: Any, problem: str) -> None:
    doc = example_report()
    mutate(doc)
    with pytest.raises(ReportMalformed, match="does not follow the contract") as caught:
        LeakReading.parse(doc, "http://127.0.0.1:1/x")
    assert problem in str(caught.value) and "http://127.0.0.1:1/x" in str(caught.value)


def test_not_an_object() -> None:
    with pytest.raises(ReportMalformed, match="not a JSON object"):
        LeakReading.parse([1, 2], "x")


# -------------------------------------------------------------------------------------- truth
@pytest.mark.parametrize("hole, gpus, share, seconds, gpu_seconds", [
    (Hole.DATA_PIPELINE, 8, 0.5, 12.0, 48.0),
    (Hole.COMMUNICATION, 8, 0.5, 12.0, 48.0),
    (Hole.DATA_PIPELINE, 4, 0.25, 10.0, 10.0),
    (Hole.COMMUNICATION, 8, 0.0, 12.0, 0.0),
])
def test_stall_truth(hole: Hole, gpus: int, share: float, seconds: float, gpu_seconds: float) -> None:
    truth = stall_truth(hole, gpus, share, seconds)
    assert truth.gpu_seconds == pytest.approx(gpu_seconds) and truth.hole is hole
    assert truth.gpu_hours == pytest.approx(gpu_seconds / 3600)
    assert f"{gpus} GPUs x {share:g}" in truth.formula


def test_stall_truth_refuses_other_holes_and_bad_inputs() -> None:
    with pytest.raises(ValueError, match="not fragmentation"):
        stall_truth(Hole.FRAGMENTATION, 8, 0.5, 12)
    with pytest.raises(ValueError):
        stall_truth(Hole.DATA_PIPELINE, 8, 1.5, 12)


@pytest.mark.parametrize("blocked, free, seconds, gpu_seconds", [(4, 8, 12.0, 48.0), (6, 4, 10.0, 40.0),
                                                                  (4, 0, 12.0, 0.0)])
def test_fragmentation_truth_is_bounded_by_free_and_blocked(blocked: int, free: int, seconds: float,
                                                            gpu_seconds: float) -> None:
    assert fragmentation_truth(blocked, free, seconds).gpu_seconds == pytest.approx(gpu_seconds)


def test_measured_stall_truth_is_what_each_rank_measured_of_its_own_waits() -> None:
    ranks = {"a": StallTotals(steps=100, input_s=5.1, compute_s=4.4, comm_s=0.5, wall_s=10.0),
             "b": StallTotals(steps=99, input_s=4.9, compute_s=4.4, comm_s=0.6, wall_s=9.9)}
    data = measured_stall_truth(Hole.DATA_PIPELINE, 4, ranks)
    comm = measured_stall_truth(Hole.COMMUNICATION, 4, ranks)
    assert data.gpu_seconds == pytest.approx(4 * 10.0) and comm.gpu_seconds == pytest.approx(4 * 1.1)
    assert "199 steps of 2 rank(s)" in data.formula
    with pytest.raises(ValueError, match="not fragmentation"):
        measured_stall_truth(Hole.FRAGMENTATION, 4, ranks)


def test_fault_truth_is_downtime_plus_recomputed_work() -> None:
    truth = fault_truth(8, t_fault=100.0, t_resume=106.5, step_seconds=0.1, steps_at_fault=57, checkpoint=50)
    assert truth.gpu_seconds == pytest.approx(8 * 6.5 + 8 * 0.1 * 7)
    assert "7 lost steps" in truth.formula and "checkpoint 50" in truth.formula


@pytest.mark.parametrize("window, gpu_seconds", [
    ((95.0, 110.0), 8 * 6.5 + 8 * 0.1 * 7),      # all inside
    ((102.0, 110.0), 8 * 4.5),                   # fault before the window: no recomputed work, downtime clipped
    ((95.0, 104.0), 8 * 4.0 + 8 * 0.1 * 7),      # resume after the window: downtime clipped
])
def test_fault_truth_is_clipped_to_the_window(window: tuple[float, float], gpu_seconds: float) -> None:
    truth = fault_truth(8, 100.0, 106.5, 0.1, 57, 50, window)
    assert truth.gpu_seconds == pytest.approx(gpu_seconds)


def test_fault_truth_refuses_a_resume_before_the_fault() -> None:
    with pytest.raises(ValueError, match="before fault"):
        fault_truth(8, 10.0, 9.0, 0.1, 5, 0)


def test_rfc3339_round_trip() -> None:
    assert rfc3339(1800000000.25) == "2027-01-15T08:00:00.250Z"
    assert parse_time("2027-01-15T08:00:00.250Z") == pytest.approx(1800000000.25)
    assert parse_time("2027-01-15T09:00:00.250+01:00") == pytest.approx(1800000000.25)
    assert parse_time("yesterday") is None


# -------------------------------------------------------------------------------------- judge
def reading_with(**holes: float) -> LeakReading:
    doc = example_report()
    values = {"dataPipeline": 0.0, "communication": 0.0, "fragmentation": 0.0, "faultTolerance": 0.0, **holes}
    ranked = sorted(values.items(), key=lambda kv: -kv[1])
    doc["holes"] = [{"rank": i + 1, "name": n, "gpuHours": v, "share": 0.0} for i, (n, v) in enumerate(ranked)]
    doc["largest"] = ranked[0][0] if ranked[0][1] > 0 else None
    return LeakReading.parse(doc, "test")


FRAG = Truth(Hole.FRAGMENTATION, 48.0, "4 GPUs x 12 s")  # 0.01333 GPU-h


def test_the_right_hole_is_named() -> None:
    naming = judge_naming(FRAG, reading_with(fragmentation=0.0135, dataPipeline=0.001))
    assert naming.ok and "fragmentation" in naming.message


def test_a_wrong_hole_says_what_was_expected_and_what_was_reported() -> None:
    naming = judge_naming(FRAG, reading_with(fragmentation=0.0133, dataPipeline=0.02))
    assert not naming.ok
    assert naming.message.startswith("expected the largest hole to be fragmentation (0.01333 GPU-h injected); "
                                     "the leak report names data pipeline (0.02 GPU-h)")


def test_no_hole_at_all() -> None:
    naming = judge_naming(FRAG, reading_with())
    assert not naming.ok and "names no hole (every hole is zero)" in naming.message


@pytest.mark.parametrize("reported, tolerance, ok, error", [
    (48.0 / 3600, 10, True, 0.0),
    (48.0 * 1.09 / 3600, 10, True, 9.0),
    (48.0 * 0.91 / 3600, 10, True, 9.0),
    (48.0 * 1.11 / 3600, 10, False, 11.0),
    (48.0 * 0.5 / 3600, 10, False, 50.0),
    (48.0 * 1.11 / 3600, 12.5, True, 11.0),
])
def test_the_size_is_judged_against_the_tolerance(reported: float, tolerance: float, ok: bool, error: float) -> None:
    sizing = judge_size(FRAG, reading_with(fragmentation=reported), tolerance)
    assert sizing.ok is ok
    assert sizing.error_percent == pytest.approx(error, abs=1e-6)
    assert f"tolerance {tolerance:g} %" in sizing.message


def test_a_size_of_nothing_cannot_be_judged() -> None:
    with pytest.raises(ValueError, match="cannot judge a size of 0"):
        judge_size(Truth(Hole.FRAGMENTATION, 0.0, ""), reading_with(), 10)


# ------------------------------------------------------------------------------------ sources
class _Server:
    """A real loopback HTTP server answering every GET with ``status`` and ``body`` (and keeping the queries)."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.body, self.queries = status, body, []  # type: ignore[var-annotated]
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.queries.append(parse_qs(urlparse(self.path).query))
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: Any) -> None:
                pass
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/apis/firedrill.dev/v1alpha1/leakreport"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[_Server] = []

    def start(status: int, body: Any) -> _Server:
        server = _Server(status, body if isinstance(body, bytes) else json.dumps(body).encode())
        servers.append(server)
        return server
    yield start
    for s in servers:
        s.close()


def test_url_source_reads_the_report_with_the_window(serve: Any) -> None:
    server = serve(200, example_report())
    reading = UrlSource(server.url).read(1800000000.0, 1800003600.0)
    assert reading.largest == "fragmentation"
    assert server.queries == [{"start": ["2027-01-15T08:00:00.000Z"], "end": ["2027-01-15T09:00:00.000Z"]}]


def test_url_source_404_is_unavailable_and_says_how_to_configure(serve: Any) -> None:
    server = serve(404, b"{}")
    with pytest.raises(ReportUnavailable, match="answered 404.*leakReport.url.*prometheus.url"):
        UrlSource(server.url).read(0, 1)


def test_url_source_unreachable(serve: Any) -> None:
    server = serve(200, b"{}")
    url = server.url
    server.close()
    with pytest.raises(ReportUnavailable, match="cannot be reached"):
        UrlSource(url, timeout=2).read(0, 1)


@pytest.mark.parametrize("status, body, match", [(200, b"<html>", "not JSON"), (400, b"{}", "refused the window"),
                                                 (200, {"kind": "LeakReport"}, "does not follow the contract")])
def test_url_source_malformed(serve: Any, status: int, body: Any, match: str) -> None:
    with pytest.raises(ReportMalformed, match=match):
        UrlSource(serve(status, body).url).read(0, 1)


def test_prometheus_source_unreachable_is_unavailable() -> None:
    # The computation itself: tests/unit/drills/test_leak_prometheus.py.
    with pytest.raises(ReportUnavailable, match="cannot be reached.*prometheus.url"):
        PrometheusSource("http://127.0.0.1:9", timeout=2).read(0, 1)


class _Driver:
    host = "https://127.0.0.1:6443"

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []  # type: ignore[var-annotated]

    def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
        self.calls.append((method, path, query))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_api_server_source_uses_the_contract_path() -> None:
    driver = _Driver(example_report())
    reading = ApiServerSource(driver).read(1800000000.0, 1800003600.0)  # type: ignore[arg-type]
    assert reading.largest == "fragmentation"
    assert driver.calls == [("GET", "/apis/firedrill.dev/v1alpha1/leakreport",
                             {"start": "2027-01-15T08:00:00.000Z", "end": "2027-01-15T09:00:00.000Z"})]


def test_api_server_source_404_is_unavailable() -> None:
    from drills.kube.driver import KubeError, TargetUnreachable
    with pytest.raises(ReportUnavailable, match="does not serve the leak report \\(404\\).*leakReport.url"):
        ApiServerSource(_Driver(KubeError("GET x: 404", 404))).read(0, 1)  # type: ignore[arg-type]
    with pytest.raises(ReportUnavailable, match="could not be read"):
        ApiServerSource(_Driver(TargetUnreachable("down"))).read(0, 1)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ profile
def _profile(tmp_path: Path, **extra: Any) -> Path:
    doc = {"name": "staging", "flavor": "volcano", "namespace": "firedrill", "queue": "default",
           "canary_image": "registry.k8s.io/pause:3.10", "fault": {"method": "kubelet-stop"}, **extra}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_profile_leak_report_url(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, leakReport={"url": "https://dash.example/leakreport"}))
    assert profile.leak_report == LeakReportSettings(url="https://dash.example/leakreport")
    assert profile.to_dict()["leakReport"] == {"url": "https://dash.example/leakreport"}
    assert isinstance(source_for(profile, _Driver({})), UrlSource)  # type: ignore[arg-type]


def test_profile_prometheus_url(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, prometheus={"url": "http://prometheus.monitoring:9090"}))
    source = source_for(profile, _Driver({}))  # type: ignore[arg-type]
    assert isinstance(source, PrometheusSource) and source.settle == 3.0  # the embedded 1 s scrapes
    assert profile.to_dict()["prometheus"] == {"url": "http://prometheus.monitoring:9090"}


def test_a_slow_scraping_prometheus_is_asked_two_scrapes_after_the_window(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, prometheus={"url": "http://prometheus.monitoring:9090",
                                                          "scrape_interval": 30}))
    source = source_for(profile, _Driver({}))  # type: ignore[arg-type]
    assert isinstance(source, PrometheusSource) and source.settle == 60.0
    assert source.lag == 30.0  # a fragmentation window opens a scrape after the scheduler's verdict
    assert profile.to_dict()["prometheus"] == {"url": "http://prometheus.monitoring:9090", "scrape_interval": 30.0}


def test_sources_that_read_the_platform_s_own_account_open_a_window_at_once(tmp_path: Path) -> None:
    assert ApiServerSource.lag == 0.0 and UrlSource.lag == 0.0


@pytest.mark.parametrize(("conditions", "said"), [
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available"}],
     True),
    ([{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}], False),
    ([{"type": "PodScheduled", "status": "True"}], False),
    ([], False),
])
def test_the_fragmentation_window_waits_for_the_scheduler_s_unschedulable_verdict(conditions: list, said: bool) -> None:
    assert unschedulable({"status": {"phase": "Pending", "conditions": conditions}}) is said
    assert unschedulable(None) is False


def test_default_source_is_the_api_server_and_the_profile_dict_is_unchanged() -> None:
    profile = reference_profile()
    assert isinstance(source_for(profile, _Driver({})), ApiServerSource)  # type: ignore[arg-type]
    assert "leakReport" not in profile.to_dict() and "prometheus" not in profile.to_dict()


@pytest.mark.parametrize("extra, problem", [
    ({"leakReport": {"url": "dash.example/leak"}}, "leakReport.url: 'dash.example/leak' is not an absolute"),
    ({"prometheus": {"url": "ftp://x"}}, "prometheus.url: 'ftp://x' is not an absolute"),
    ({"leakReport": {"uri": "https://x"}}, "leakReport.uri: unknown field; did you mean 'url'?"),
    ({"leakReport": {"url": "https://a/x"}, "prometheus": {"url": "https://b"}}, "both set"),
    ({"prometheus": {"url": "https://b", "scrape_interval": 0}}, "prometheus.scrape_interval: 0 must be above 0"),
    ({"prometheus": {"url": "https://b", "scrape_interval": "15s"}}, "prometheus.scrape_interval"),
])
def test_profile_source_mistakes(tmp_path: Path, extra: dict[str, Any], problem: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(_profile(tmp_path, **copy.deepcopy(extra)))
    assert any(problem in p for p in caught.value.problems), caught.value.problems


# ------------------------------------------------------------------------ the drill's verdicts
def drill_with(reading: LeakReading | None, truth: Truth = FRAG) -> Any:
    from drills.kinds.leak.drill import LeakDrill
    from drills.records.verdict import DrillResult
    drill = LeakDrill(target=None, result=DrillResult("leak-identification"), run_id="fd0001")  # type: ignore[arg-type]
    drill.hole, drill.truth, drill.reading = truth.hole, truth, reading
    drill.source = UrlSource("http://user:secret@127.0.0.1:9/leakreport")
    drill.result.details["leak"] = {}
    return drill


def test_the_drill_fails_naming_expected_reported_and_the_source() -> None:
    from drills.records.verdict import Verdict
    drill = drill_with(reading_with(fragmentation=0.0133, dataPipeline=0.02))
    drill.judge_named(Hole.FRAGMENTATION)
    drill.judge_size(Hole.FRAGMENTATION, 10)
    assert drill.result.verdict is Verdict.FAIL
    named = drill.result.findings[0]
    assert named.startswith("expected the largest hole to be fragmentation (0.01333 GPU-h injected); "
                            "the leak report names data pipeline (0.02 GPU-h)")
    assert "(source: the configured leak report URL http://127.0.0.1:9/leakreport)" in named
    assert "secret" not in named
    assert drill.result.judgements[0].verdict is Verdict.PASS  # the size itself was right (0.0133 vs 0.01333)
    m = drill.result.measurements["fragmentation GPU-hours"]
    assert m.value == pytest.approx(48 / 3600) and m.platform == pytest.approx(0.0133)


def test_the_drill_passes_a_right_report() -> None:
    from drills.records.verdict import Verdict
    drill = drill_with(reading_with(fragmentation=0.0134, dataPipeline=0.001))
    drill.judge_named(Hole.FRAGMENTATION)
    drill.judge_size(Hole.FRAGMENTATION, 10)
    assert drill.result.verdict is Verdict.PASS and not drill.result.findings
    assert drill.result.measurements["hole size error"].value == pytest.approx(0.5, abs=0.01)


def test_a_size_off_by_more_than_the_tolerance_fails_with_both_numbers() -> None:
    from drills.records.verdict import Verdict
    drill = drill_with(reading_with(fragmentation=0.02))
    drill.judge_named(Hole.FRAGMENTATION)
    drill.judge_size(Hole.FRAGMENTATION, 10)
    assert drill.result.verdict is Verdict.FAIL
    assert "hole size error: measured 50.000 %, threshold <= 10 % -- MISSED" == drill.result.judgements[0].message
    assert "sizes fragmentation at 0.02 GPU-h; 0.01333 GPU-h were injected (+50.0 %" in drill.result.findings[0]


def test_no_reading_is_never_a_pass() -> None:
    from drills.records.verdict import Verdict
    drill = drill_with(None)
    drill.judge_size(Hole.FRAGMENTATION, 10)
    assert drill.result.verdict is Verdict.FAIL and "never measured" in drill.result.judgements[0].message


def test_judging_another_hole_than_the_one_opened_is_refused() -> None:
    drill = drill_with(reading_with(fragmentation=0.0134))
    with pytest.raises(ValueError, match="opened fragmentation but judges data pipeline"):
        drill.judge_named(Hole.DATA_PIPELINE)
