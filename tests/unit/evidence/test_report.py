"""The HTML report: escaping, self-containment, the charts each drill gets, and `firedrill report`.

The records here are shaped like what ``firedrill run`` produces (values copied from real runs on the
embedded reference platform): node-pull instants on three clocks, gang bind reports, partial-hold episodes
on the harness's monotonic clock, a ``submit-gangs`` action in the timeline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from drills.cli import app
from drills.records.evidence.record import (
    JudgementRecord,
    MeasurementRecord,
    RunRecord,
    ScenarioRecord,
    TargetRecord,
    ThresholdRecord,
)
from drills.records.evidence.report import (
    ReportError,
    SignatureStatus,
    find_archive,
    fmt_value,
    nice_axis,
    render_archive,
    render_report,
    write_report,
)

KEYID = "3f9a0c4be21d77aa90e1c5d2b6f8a4e0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6"
SIG = SignatureStatus(KEYID, ephemeral=True)
FAULT_MONO, FAULT_WALL = 5195.623091516, 1796004344.7904594
SUBMIT_MONO = 5192.924

FINGERPRINT: dict[str, Any] = {
    "crds": {"batch.volcano.sh": ["v1alpha1"], "scheduling.volcano.sh": ["v1beta1"]},
    "cuda_runtime_versions": {"12.4": 5}, "driver_versions": {"550.54.15": 5},
    "gpus": {"allocatable": 40, "capacity": 40, "resource": "nvidia.com/gpu",
             "models": [{"allocatable": 40, "capacity": 40, "labelled": 40, "nodes": 5,
                         "product": "NVIDIA-H100-80GB-HBM3"}]},
    "labels": {"kubernetes.io/arch": {"amd64": 5}, "nvidia.com/gpu.memory": {"81559": 5},
               "nvidia.com/gpu-operator.version": {"v24.3.0": 5}},
    "nodes": {"count": 5, "software": {"kubeletVersion": {"v1.32.0-firedrill": 5},
                                       "containerRuntimeVersion": {"firedrill-sim://0.1.0": 5}}},
    "schema": "https://firedrill.dev/target-fingerprint/v1",
    "server": {"gitVersion": "v1.32.0-firedrill", "major": "1", "minor": "32", "platform": "linux/amd64"},
}

PHASE_LIMITS = {"detect": 5.0, "evict": 5.0, "replace": 10.0, "resume": 10.0, "total": 20.0}


def judged(name: str, value: float | None, limit: float, unit: str = "s") -> JudgementRecord:
    ok = value is not None and value <= limit
    return JudgementRecord(ThresholdRecord(name, limit, unit, "<="), value, "PASS" if ok else "FAIL",
                           f"{name}: measured {value} {unit}, threshold <= {limit:g} {unit}")


def node_pull(repeat: int = 1, detect: float = 2.4, *, resumed: bool = True, confirmed: bool = True,
              scenario: str = "A training job survives losing the node of one worker") -> ScenarioRecord:
    """A node pull as the drill records it; the platform's stamps lag or lead the harness by a few ms."""
    at = {"fault": 0.0, "detect": detect, "evict": detect + 0.052, "replace": detect + 0.116,
          "resume": detect + 0.724}
    skew = {"fault": None, "detect": -0.0048, "evict": 0.0015, "replace": -0.0068, "resume": -0.0139}
    if not resumed:
        del at["resume"]
    instants = {k: {"mono": FAULT_MONO + t, "wall": FAULT_WALL + t,
                    "server": None if skew[k] is None else FAULT_WALL + t + skew[k]} for k, t in at.items()}
    pairs = {"detect": ("fault", "detect"), "evict": ("detect", "evict"), "replace": ("evict", "replace"),
             "resume": ("replace", "resume"), "total": ("fault", "resume")}
    measurements, judgements = [], []
    for phase, (a, b) in pairs.items():
        if b in at:
            value = at[b] - at[a]
            platform = (at[b] + (skew[b] or 0)) - (at[a] + (skew[a] or 0))
            measurements.append(MeasurementRecord(phase, value, "s", platform, value - platform))
        else:
            value = None
            measurements.append(MeasurementRecord(phase, None, "s", note=f"t_{b} never observed"))
        judgements.append(judged(phase, value, PHASE_LIMITS[phase]))
    measurements += [MeasurementRecord("lost steps", 4.0, "steps"),
                     MeasurementRecord("GPU-seconds lost", 28.19, "GPU-s")]
    judgements.append(judged("lost steps", 4.0, 10.0, "steps"))
    verdict = "PASS" if all(j.verdict == "PASS" for j in judgements) else "FAIL"
    details: dict[str, Any] = {"fault": {"node": "gpu-node-3", "method": "kill", "rank": 0, "confirmed": confirmed,
                                         "detail": "SIGKILL pid 31392", "checkpoint_at_fault": 5,
                                         "step_at_fault": 9}}
    if confirmed:
        details["instants"] = instants
    else:
        measurements, judgements, verdict = [], [], "INCONCLUSIVE"
    return ScenarioRecord(
        "Node pull", "node_pull.feature", scenario, ("clause:5.1",), "node-pull", verdict,
        tuple(judgements), tuple(measurements),
        () if confirmed else ("the kill fault on gpu-node-3 could not be confirmed (agent still alive); "
                              "no timing is claimed",),
        details, 4.7, "", repeat)


def gang_fits(repeat: int = 1) -> ScenarioRecord:
    bind = {f"gang-a-fd5a036a-worker-{i}": {"gang": "gang-a-fd5a036a", "node": f"gpu-node-{3 - i}",
                                            "bound_s": 0.035 + 0.01 * i, "running_s": 0.051 + 0.01 * i}
            for i in range(4)}
    return ScenarioRecord(
        "Gang submission", "gang_submission.feature", "A gang that fits is placed whole", ("clause:4.1",),
        "gang-submission", "PASS",
        (judged("time to run whole", 0.0736, 30.0), judged("partial-hold GPU-seconds", 0.0, 0.0, "GPU-s")),
        (MeasurementRecord("time to run whole", 0.0736, "s"),
         MeasurementRecord("partial-hold GPU-seconds", 0.0, "GPU-s", note="episodes shorter than 1 s count zero")),
        (), {"free_gpus_before": {f"gpu-node-{i}": 8 for i in range(4)}, "bind_report": bind,
             "partial_hold": {"gang-a-fd5a036a": {"gpu_seconds": 0.0, "episodes": []}}},
        0.08, "", repeat)


DEADLOCK = ("DEADLOCK: gang gang-a-fde71034 holds 16 GPUs with 2 of 3 workers placed; gang gang-b-fde71034 holds "
            "16 GPUs with 2 of 3 workers placed. Each waits for GPUs another holds, so none can run (the scheduler "
            "placed the gangs pod by pod, without gang scheduling).")


def gang_deadlock() -> ScenarioRecord:
    """The no-gang scheduler's half-job deadlock: two gangs hold 2 of 3 workers each."""
    bind: dict[str, dict[str, Any]] = {}
    for g, offset in (("a", 0.0), ("b", 0.005)):
        for i in range(3):
            placed = i < 2
            bind[f"gang-{g}-fde71034-worker-{i}"] = {
                "gang": f"gang-{g}-fde71034", "node": f"gpu-node-{i + (2 if g == 'a' else 0)}" if placed else None,
                "bound_s": round(0.02 + offset + 0.01 * i, 3) if placed else None,
                "running_s": round(0.024 + offset + 0.01 * i, 3) if placed else None}
    holds = {f"gang-{g}-fde71034": {"gpu_seconds": 16.3, "episodes": [[SUBMIT_MONO + 0.02 + off,
                                                                        SUBMIT_MONO + 1.044, 2, 16]]}
             for g, off in (("a", 0.0), ("b", 0.005))}
    return ScenarioRecord(
        "Gang submission", "gang_submission.feature", "Two gangs that each need more than half of the free GPUs",
        ("clause:4.2",), "gang-submission", "FAIL",
        (JudgementRecord(ThresholdRecord("time until one gang runs whole", 30.0, "s", "<="), None, "FAIL",
                         "time until one gang runs whole: never measured (a deadlock was seen)"),
         judged("partial-hold GPU-seconds", 32.53, 0.0, "GPU-s")),
        (MeasurementRecord("time until one gang runs whole", None, "s", note="a deadlock was seen"),
         MeasurementRecord("partial-hold GPU-seconds", 32.53, "GPU-s")),
        (DEADLOCK,), {"bind_report": bind, "partial_hold": holds}, 1.1)


def gang_timeline() -> tuple[dict[str, Any], ...]:
    submit = {"mono": SUBMIT_MONO, "wall": 1796004341.0, "server": None, "kind": "Action", "event": "submit-gangs",
              "namespace": "", "name": "gang-a-fde71034,gang-b-fde71034",
              "summary": {"target": "gang-a-fde71034,gang-b-fde71034", "workers": 3, "gpus_per_worker": 8}}
    deleted = [{"mono": SUBMIT_MONO + 1.12, "wall": 1796004342.1, "server": None, "kind": "Pod", "event": "DELETED",
                "namespace": "firedrill", "name": f"gang-{g}-fde71034-worker-{i}",
                "summary": {"phase": "Running", "node": "gpu-node-0", "terminating": False}}
               for g in "ab" for i in range(2)]
    return (submit, *deleted)


def make_record(scenarios: tuple[ScenarioRecord, ...] | None = None, *, verdict: str | None = None,
                timeline: tuple[dict[str, Any], ...] | None = None,
                description: str = "embedded reference platform (4 nodes + 1 spare, 8 GPUs each, no-gang "
                                   "scheduler, tuned healing) at https://127.0.0.1:41447") -> RunRecord:
    scenarios = scenarios if scenarios is not None else (gang_fits(), gang_deadlock(), node_pull())
    order = ["PASS", "INCONCLUSIVE", "FAIL", "ERROR"]
    return RunRecord(
        run_id="20261130T020734Z-05ac", started="2026-11-30T02:07:34Z", finished="2026-11-30T02:07:44Z",
        harness_version="0.1.0", harness_commit="fa100b2",
        target=TargetRecord("embedded", description, FINGERPRINT, "2d927010b09201a70b6c917dc2b010ff" * 2),
        features={"gang_submission.feature": "ab" * 32, "node_pull.feature": "cd" * 32},
        profile={"flavor": "volcano"}, profile_digest="ef" * 32, options={"repeat": 1, "scheduler_profile": "no-gang"},
        scenarios=scenarios, verdict=verdict or max((s.verdict for s in scenarios), key=order.index),
        timeline=gang_timeline() if timeline is None else timeline)


def section(html: str, testid: str) -> str:
    """The text of the element carrying ``data-testid=testid`` (up to its section's end)."""
    start = html.index(f'data-testid="{testid}"')
    end = html.find("</section>", start)
    return html[start:end]


def svgs(html: str, testid: str) -> list[str]:
    return re.findall(rf'<svg[^>]*data-testid="{testid}".*?</svg>', html, re.S)


# ------------------------------------------------------------------------------------------- tests


def test_names_from_the_cluster_and_the_feature_file_are_escaped() -> None:
    evil = '<script>alert("x")</script>'
    s = node_pull(scenario=f"Pull {evil}")
    s = ScenarioRecord(**{**s.__dict__, "feature": "Node <b>pull</b>",
                          "details": {**s.details, "fault": {**s.details["fault"], "node": "<img src=x onerror=y>"}},
                          "findings": (f"DEADLOCK: {evil}",)})
    g = gang_deadlock()
    bind = {f"{k}<i>": {**v, "gang": v["gang"] + '"><svg onload=1>'} for k, v in g.details["bind_report"].items()}
    g = ScenarioRecord(**{**g.__dict__, "details": {**g.details, "bind_report": bind}})
    fp = {**FINGERPRINT, "labels": {"nvidia.com/x.version": {"<u>550</u>": 1}}}
    record = make_record((s, g), description=f"cluster {evil}", timeline=())
    record = RunRecord(**{**record.__dict__, "target": TargetRecord("cluster", f"cluster {evil}", fp, "00"),
                          "run_id": "run-<x>"})
    html = render_report(record, SignatureStatus("<k>" + KEYID, False, None, note="<em>note</em>"))
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    for raw in ("<img", "<b>pull", "<i>", "<svg onload", "<u>550", "<em>note", "<k>", "run-<x>"):
        assert raw not in html, raw
    assert "&lt;img src=x onerror=y&gt;" in html and "&lt;u&gt;550&lt;/u&gt;" in html


def test_no_external_resources_and_a_policy_that_forbids_them() -> None:
    html = render_report(make_record(), SIG)
    assert not re.search(r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"https?://[^\s\"'<]*\.(?:css|js|woff2?|ttf|png|svg|jpe?g|gif)\b", html, re.I)
    assert "@import" not in html and "url(" not in html
    for tag in ("<script", "<link", "<img", "<iframe", "<object", "<embed"):
        assert tag not in html.lower(), tag
    assert "default-src 'none'" in html
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', html))


def test_stable_ids_for_the_verdict_clause_table_charts_and_fingerprint() -> None:
    html = render_report(make_record(), SIG)
    for needle in ('id="verdict" data-testid="verdict"', 'id="clause-table" data-testid="clause-table"',
                   'id="fingerprint" data-testid="fingerprint"'):
        assert needle in html
    s = node_pull()
    assert f'id="nodepull-{s.slug}-chart"' in html
    assert f'id="gang-{gang_deadlock().slug}-chart"' in html


@pytest.mark.parametrize("verdict,icon,headline", [
    ("PASS", "\u2713", "Every promise held"),
    ("FAIL", "\u2717", "A promise was broken"),
    ("INCONCLUSIVE", "?", "could not be judged"),
    ("ERROR", "!", "The harness could not finish"),
])
def test_verdict_is_big_text_plus_colour(verdict: str, icon: str, headline: str) -> None:
    s = ScenarioRecord(**{**gang_fits().__dict__, "verdict": verdict,
                          "error": "Traceback: boom" if verdict == "ERROR" else ""})
    html = render_report(make_record((s,), verdict=verdict), SIG)
    top = section(html, "verdict")
    assert f'class="verdict v-{verdict.lower()}"' in html
    assert f'<span class="word" data-testid="verdict-word">{verdict}</span>' in top
    assert icon in top and headline in top
    assert "20261130T020734Z-05ac" in top and "2026-11-30 02:07:34 UTC" in top and "(10.0 s)" in top
    assert "embedded reference platform (4 nodes + 1 spare" in top
    if verdict == "ERROR":
        assert "HARNESS ERROR" in section(html, "findings") and "Traceback: boom" in html


def test_signature_status_lines() -> None:
    top = section(render_report(make_record(), SIG), "verdict")
    assert "signed by key 3f9a0c4be21d77aa\u2026 (ephemeral: integrity only)" in top
    assert f'title="key id {KEYID}"' in top and "firedrill verify" in top
    persistent = SignatureStatus(KEYID, ephemeral=False, verified=True)
    assert "persistent key: integrity and origin" in persistent.describe()
    assert "signatures verified" in section(render_report(make_record(), persistent), "verdict")
    bad = section(render_report(make_record(), SignatureStatus(KEYID, verified=False)), "verdict")
    assert "SIGNATURE CHECK FAILED" in bad
    assert "unsigned" in section(render_report(make_record(), SignatureStatus()), "verdict")
    assert SignatureStatus.from_signer({"algorithm": "ed25519", "keyid": KEYID, "ephemeral": False}) == \
        SignatureStatus(KEYID, ephemeral=False)
    assert SignatureStatus.from_signer(None).keyid is None


def test_clause_table_traces_each_clause_to_scenario_judgements_and_evidence() -> None:
    record = make_record((node_pull(), gang_deadlock(), gang_fits()))
    html = render_report(record, SIG)
    table = section(html, "clause-table")
    rows = re.findall(r'<tr id="scenario-[^"]*" data-testid="clause-row" data-verdict="(\w+)">(.*?)</tr>\s*(?=<tr id|'
                      r'</tbody>)', table, re.S)
    assert [v for v, _ in rows] == ["PASS", "FAIL", "PASS"]  # sorted by clause: 4.1, 4.2, 5.1
    assert [re.search(r'class="clause">([^<]+)<', r).group(1) for _, r in rows] == ["4.1", "4.2", "5.1"]
    pull = rows[2][1]
    assert f"evidence/{node_pull().slug}.dsse.json" in pull
    assert "evidence/node-pull-a-training-job-survives-losing-the-node-of-one-worker.dsse.json" in pull
    for phase, value, limit in (("detect", "2.40 s", "5 s"), ("evict", "52 ms", "5 s"), ("total", "3.12 s", "20 s")):
        assert re.search(rf">{phase}</td><td class=\"jm num\">{value}</td><td class=\"num\">\u2264 {limit}<", pull)
    assert "4 steps" in pull and "\u2264 10 steps" in pull
    deadlock = rows[1][1]
    assert "not measured" in deadlock and "a deadlock was seen" in deadlock
    assert "<strong>DEADLOCK</strong>: gang gang-a-fde71034 holds 16 GPUs" in deadlock
    findings = section(html, "findings")
    assert '<span class="tag">DEADLOCK</span>gang gang-a-fde71034 holds 16 GPUs' in findings
    assert "clause 4.2" in findings
    assert html.index('data-testid="findings"') < html.index('data-testid="clause-table"')


def test_a_scenario_without_clause_is_listed_last() -> None:
    loose = ScenarioRecord(**{**gang_fits().__dict__, "tags": (), "scenario": "Untagged"})
    html = render_report(make_record((loose, node_pull())), SIG)
    table = section(html, "clause-table")
    assert table.index("5.1") < table.index("Untagged") and "no clause" in table


def test_charts_are_drawn_for_the_right_scenarios() -> None:
    record = make_record((gang_fits(), node_pull(), gang_deadlock()))
    html = render_report(record, SIG)
    pulls, gangs = svgs(html, "nodepull-chart"), svgs(html, "gang-chart")
    assert len(pulls) == 1 and len(gangs) == 2
    chart = pulls[0]
    for phase in ("detect", "evict", "replace", "resume", "total"):
        assert f'data-phase="{phase}"' in chart and f">{phase}</text>" in chart
    for instant in ("t_fault", "t_detect", "t_evict", "t_replace", "t_resume"):
        assert f">{instant}</text>" in chart
    assert ">2.40 s</text>" in chart and ">3.12 s</text>" in chart
    assert "platform 2.40 s" in chart and "platform 56 ms" in chart  # platform stamps beside the harness
    assert "seconds from the fault" in chart
    pull_section = section(html, "nodepull-card")
    assert "+4.8 ms" in pull_section  # harness minus platform: the measurement error
    fits = next(g for g in gangs if "gang-a-fd5a036a" in g)
    assert fits.count('class="pod"') == 4 and "partial hold:" not in fits
    dead = next(g for g in gangs if "fde71034" in g)
    assert dead.count('class="pod"') == 6 and dead.count("never placed") == 2
    assert dead.count('class="episode"') == 2 and "partial hold: 2 pods, 16 GPUs, 1.02 s" in dead
    assert "seconds from submission" in dead


def test_no_chart_without_a_drill() -> None:
    plain = ScenarioRecord("Misc", "misc.feature", "Only words", ("clause:9",), "scenario", "PASS")
    html = render_report(make_record((plain,)), SIG)
    assert not svgs(html, "nodepull-chart") and not svgs(html, "gang-chart")
    assert 'id="node-pulls"' not in html and 'id="gangs"' not in html


def test_partial_hold_episodes_are_placed_from_the_timeline_or_inferred() -> None:
    with_timeline = svgs(render_report(make_record((gang_deadlock(),)), SIG), "gang-chart")[0]
    without = svgs(render_report(make_record((gang_deadlock(),), timeline=()), SIG), "gang-chart")[0]

    def episode_x(svg: str) -> list[str]:
        return re.findall(r'class="episode" x="([\d.]+)"', svg)
    # the submit-gangs action puts the episode start at the first bind (0.02 s); without it the start is
    # inferred from the first bind of the gang, which is the same instant
    assert episode_x(with_timeline) == episode_x(without) and len(episode_x(without)) == 2
    # pods released at rollback (DELETED in the timeline) get a solid running bar; without it, a dot
    assert with_timeline.count('rx="2" fill="#') >= 4 and "<circle cx" in without


def test_unconfirmed_fault_and_missing_instants() -> None:
    html = render_report(make_record((node_pull(confirmed=False),)), SIG)
    assert not svgs(html, "nodepull-chart")
    assert "No timeline: the fault was never confirmed" in html and "could not be confirmed" in html
    partial = svgs(render_report(make_record((node_pull(resumed=False),)), SIG), "nodepull-chart")[0]
    assert "t_resume never observed" in partial
    assert ">t_resume</text>" not in partial


def test_repeats_get_distributions_with_p50_and_p95() -> None:
    detects = [2.0, 2.5, 3.0, 2.2, 2.8]
    record = make_record(tuple(node_pull(repeat=i + 1, detect=d) for i, d in enumerate(detects)) + (gang_fits(),))
    html = render_report(record, SIG)
    dist = section(html, "distributions")
    assert "5 runs: 5 PASS" in dist and "A gang that fits" not in dist  # single runs get no distribution
    row = re.search(r"<b>detect</b></td><td class=\"num\">5</td><td class=\"num\">([^<]+)</td>"
                    r"<td class=\"num\">([^<]+)</td>", dist)
    assert row is not None and row.groups() == ("2.50 s", "3.00 s")
    assert dist.count('class="strip"') == 7  # five phases, lost steps, GPU-seconds lost
    assert dist.count('class="dot"') == 35
    # every run keeps its chart; the repeats fold under the first
    assert len(svgs(html, "nodepull-chart")) == 5 and "The other 4 runs of this scenario" in html
    assert "(run 3 of 5)" in html


def test_fingerprint_section() -> None:
    fp = section(render_report(make_record(), SIG), "fingerprint")
    for text in ("v1.32.0-firedrill", "NVIDIA-H100-80GB-HBM3", "550.54.15", "12.4", "batch.volcano.sh", "v1alpha1",
                 "scheduling.volcano.sh", "v1beta1", "nvidia.com/gpu-operator.version", "v24.3.0",
                 "kubeletVersion", "2d927010b09201a7"):
        assert text in fp, text
    empty = make_record()
    empty = RunRecord(**{**empty.__dict__, "target": TargetRecord("cluster", "x", {}, "")})
    assert "recorded no fingerprint" in section(render_report(empty, SIG), "fingerprint")


def test_rendering_is_deterministic_and_survives_the_json_round_trip() -> None:
    record = make_record()
    again = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert render_report(record, SIG) == render_report(again, SIG) == render_report(record, SIG)


def test_formatting() -> None:
    assert fmt_value(2.4, "s") == "2.40 s" and fmt_value(0.0517, "s") == "52 ms" and fmt_value(None, "s") == \
        "not measured"
    assert fmt_value(4.0, "steps") == "4 steps" and fmt_value(32.53, "GPU-s") == "32.5 GPU-s"
    assert nice_axis(3.124) == (4.0, [0.0, 1.0, 2.0, 3.0, 4.0])
    assert nice_axis(2.6)[1] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert nice_axis(0.074)[0] == pytest.approx(0.08)


# ---------------------------------------------------------------------------------- the archive and CLI


def write_archive(folder: Path, record: RunRecord | None = None, signer: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps((record or make_record()).to_dict()))
    if signer is not None:
        (folder / "signer.json").write_text(json.dumps(signer))
    return folder


def test_render_archive_reads_record_and_signer(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "reports" / "run-1", signer={"algorithm": "ed25519", "keyid": KEYID,
                                                                   "ephemeral": True})
    assert find_archive("run-1", tmp_path / "reports") == archive
    assert find_archive(archive) == archive
    assert render_archive(archive) == render_report(make_record(), SIG)
    unsigned = write_archive(tmp_path / "u")
    assert "unsigned" in section(render_archive(unsigned), "verdict")


def test_write_report_refuses_to_break_a_sealed_archive(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "run", signer={"keyid": KEYID, "ephemeral": True})
    path, changed = write_report(archive)
    assert path == archive / "report.html" and changed
    assert write_report(archive) == (path, False)  # identical bytes: nothing to do, the manifest stays valid
    (archive / "manifest.json").write_text("{}")
    path.write_text("<p>older renderer</p>")
    with pytest.raises(ReportError, match="manifest.json records its digest"):
        write_report(archive)
    assert path.read_text() == "<p>older renderer</p>"
    elsewhere = tmp_path / "out" / "r.html"
    assert write_report(archive, elsewhere) == (elsewhere, True)
    assert write_report(archive, force=True) == (path, True) and path.read_text() == elsewhere.read_text()


def test_archive_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no run archive 'nope'"):
        find_archive("nope", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="holds no record.json"):
        find_archive(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "record.json").write_text("{not json")
    with pytest.raises(ReportError, match="cannot read"):
        render_archive(bad)
    (bad / "record.json").write_text('{"run_id": "x"}')
    with pytest.raises(ReportError, match="is not a run record"):
        render_archive(bad)


def test_cli_report(tmp_path: Path) -> None:
    runner = CliRunner()
    reports = tmp_path / "reports"
    write_archive(reports / "run-1", signer={"keyid": KEYID, "ephemeral": True})
    result = runner.invoke(app, ["report", "run-1", "--reports-dir", str(reports)])
    assert result.exit_code == 0, result.output
    assert f"wrote {reports / 'run-1' / 'report.html'}" in result.stdout
    html = (reports / "run-1" / "report.html").read_text()
    assert "(ephemeral: integrity only)" in html and 'data-testid="nodepull-chart"' in html
    again = runner.invoke(app, ["report", str(reports / "run-1")])
    assert again.exit_code == 0 and "unchanged:" in again.stdout
    missing = runner.invoke(app, ["report", "run-2", "--reports-dir", str(reports)])
    assert missing.exit_code == 2 and "no run archive 'run-2'" in missing.stderr


def test_a_sealed_archive_re_renders_to_the_same_bytes(tmp_path: Path) -> None:
    """`firedrill run` renders the report before sealing; `firedrill report` on the sealed archive must give
    the same bytes (record.json is canonical JSON), so the archive still verifies."""
    from drills.records.evidence.archive import seal
    from drills.records.evidence.signing import Signer
    from drills.records.evidence.verify import verify

    record = make_record()
    signer = Signer.generate_ephemeral()
    run_dir = tmp_path / "reports" / record.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "report.html").write_text(render_report(record, SignatureStatus(signer.keyid, signer.ephemeral)),
                                         encoding="utf-8")
    seal(run_dir, record, signer, tmp_path / "reports" / "ledger.jsonl")
    assert write_report(run_dir) == (run_dir / "report.html", False)
    assert verify(run_dir).ok


def isolation_claims_mig() -> ScenarioRecord:
    """A node that claims MIG but behaves like time-slicing: a contained Xid 94 on tenant-1's slice kills
    every tenant on the GPU (values from a run on the embedded reference platform)."""
    tenants = [f"tenant-{i}" for i in range(1, 5)]
    reason = "GPUXid94: Xid 94 (contained ECC error) on GPU 0 instance 0; the pod's GPU slice 0/{} was affected"
    outcomes = {t: {"state": "failed", "reason": reason.format(i), "expected": "failed" if i == 0 else "survived",
                    "escaped": i > 0, "spared": False} for i, t in enumerate(tenants)}
    memory = {t: {"state": "failed" if i == 0 else "survived",
                  "reason": "OutOfMemory: out of GPU memory: used 27648 MiB of its 18432 MiB" if i == 0 else "",
                  "expected": "failed" if i == 0 else "survived", "escaped": False, "spared": False}
              for i, t in enumerate(tenants)}
    matrix = {"node": "part-fd346731", "mode": "mig-single", "enforced": False,
              "layout": {"node": "part-fd346731", "mode": "mig-single", "gpus": 1, "product": "NVIDIA-H200-MIG-1g.18gb",
                         "enforced": False, "total_slices": 4,
                         "slices": [{"resource": "nvidia.com/gpu", "count": 4, "memory_mib": 18432,
                                     "profile": "1g.18gb"}]},
              "tenants": tenants, "wanted": 5, "reached": 4,
              "pending": {"tenant-5": "0/6 nodes are available: 1 Insufficient nvidia.com/gpu."},
              "probes": [{"probe": "memory", "title": "a tenant exceeds its memory share", "victim": "tenant-1",
                          "gpu": 0, "status": "done", "note": "tenant tenant-1 uses 27648 MiB of a 18432 MiB share",
                          "promised": "only that tenant", "expected": "only that tenant",
                          "affected": "only that tenant", "verdict": "PASS", "outcomes": memory},
                         {"probe": "contained", "title": "contained fault (Xid 94) on its slice",
                          "victim": "tenant-1", "gpu": 0, "status": "done", "note": "",
                          "promised": "only that tenant", "expected": "only that tenant",
                          "affected": "every tenant on that GPU", "verdict": "FAIL", "outcomes": outcomes},
                         {"probe": "reset", "title": "reset-class fault (Xid 79) on its GPU", "victim": "tenant-1",
                          "gpu": None, "status": "inconclusive", "note": "no Xid injection method",
                          "promised": "every tenant on that GPU", "outcomes": {}}]}
    finding = ("ISOLATION ESCAPED: contained fault (Xid 94) on its slice on tenant tenant-1: tenants tenant-2, "
               "tenant-3, tenant-4 should have survived on a node in mig-single, but failed")
    return ScenarioRecord(
        "Partition isolation", "partition_isolation.feature", "A node that <claims> MIG", ("clause:7.1",),
        "partition-isolation", "FAIL", (judged("tenants running", 4.0, 4.0, "tenants"),),
        (MeasurementRecord("tenants running", 4.0, "tenants"),), (finding,), {"isolation_matrix": matrix}, 12.0)


def test_isolation_matrix_tenants_by_probes_with_escapes_marked() -> None:
    html = render_report(make_record((gang_fits(), isolation_claims_mig())), SIG)
    assert 'href="#isolation"' in html
    part = section(html, "isolation")
    assert part.count('data-testid="isolation-card"') == 1
    matrix = re.search(r'<table[^>]*data-testid="isolation-matrix".*?</table>', part, re.S).group(0)
    heads = re.findall(r"<th>([^<]*)<span", matrix)
    assert heads == ["a tenant exceeds its memory share", "contained fault (Xid 94) on its slice",
                     "reset-class fault (Xid 79) on its GPU"]
    rows = re.findall(r'<tr data-tenant="(tenant-\d)">(.*?)</tr>', matrix, re.S)
    assert [t for t, _ in rows] == ["tenant-1", "tenant-2", "tenant-3", "tenant-4"]
    first, second = rows[0][1], rows[1][1]
    assert "OutOfMemory: out of GPU memory" in first and "(probed)" in first
    assert second.count('data-state="survived"') == 1 and 'data-escaped="true"' in second
    assert "ESCAPED: failed" in second and "expected: survived" in second and "GPUXid94" in second
    assert 'data-escaped="true"' not in first  # the probed tenant was meant to fail
    assert matrix.count('data-state="not run"') == 4  # the reset probe could not be performed
    assert "not performed" in matrix and "no Xid injection method" in matrix
    assert "every tenant on that GPU" in matrix and "3 tenant outcomes escaped isolation" in part
    assert "isolation-enforced=false" in part and "4 running of 5 asked for" in part
    assert "tenant-5" in part and "Insufficient nvidia.com/gpu" in part
    assert "A node that &lt;claims&gt; MIG" in part  # escaped like every other name


def test_no_isolation_section_without_a_matrix() -> None:
    html = render_report(make_record(), SIG)
    assert 'id="isolation"' not in html and 'href="#isolation"' not in html


# ------------------------------------------------------------------------------- leak report (issue 8)
LEAK_REPORT: dict[str, Any] = {
    "apiVersion": "firedrill.dev/v1alpha1", "kind": "LeakReport",
    "window": {"start": "2026-11-30T02:07:34Z", "end": "2026-11-30T02:09:10Z", "seconds": 96.0},
    "capacityGpuHours": 0.853333,
    "layers": {"allocated": {"gpuHours": 0.32, "share": 0.375}, "active": {"gpuHours": 0.2, "share": 0.234375},
               "effective": {"gpuHours": 0.08, "share": 0.09375}},
    "holes": [{"rank": 1, "name": "faultTolerance", "words": "fault tolerance", "gpuHours": 0.021, "share": 0.024609},
              {"rank": 2, "name": "dataPipeline", "words": "data pipeline", "gpuHours": 0.0135, "share": 0.01582},
              {"rank": 3, "name": "fragmentation", "words": "fragmentation", "gpuHours": 0.0131, "share": 0.015352},
              {"rank": 4, "name": "communication", "words": "communication", "gpuHours": 0.0129, "share": 0.015117}],
    "largest": "faultTolerance", "summary": "The largest hole is fault tolerance: 0.021 GPU-hours, 2.4609% of "
                                            "healthy capacity.", "tenants": []}


def leak_scenario(hole: str, words: str, verdict: str, reported: str, gpu_hours: float, error: float) -> ScenarioRecord:
    size = ThresholdRecord("hole size error", 10.0, "%", "<=")
    details = {"leak": {"hole": hole, "words": words, "seconds": 12.0,
                        "expected": {"hole": hole, "gpuHours": 48 / 3600, "gpuSeconds": 48.0,
                                     "formula": "8 GPUs x 0.5 input stall share x 12.000 s"},
                        "window": {"start": "2026-11-30T02:07:40.000Z", "end": "2026-11-30T02:07:52.000Z"},
                        "source": {"kind": "url", "where": "the configured leak report URL http://127.0.0.1:1/x"},
                        "reported": {"largest": reported, "gpuHours": gpu_hours}, "report": LEAK_REPORT}}
    findings = () if verdict == "PASS" else (
        f"expected the largest hole to be {words} (0.01333 GPU-h injected); the leak report names fragmentation",)
    return ScenarioRecord(
        "Leak identification", "leak_identification.feature", f"The leak report names the hole we opened ({words})",
        ("clause:8.1",), "leak-identification", verdict,
        (JudgementRecord(size, error, "PASS" if error <= 10 else "FAIL", f"hole size error: measured {error}"),),
        (MeasurementRecord(f"{words} GPU-hours", 48 / 3600, "GPU-h", gpu_hours, 48 / 3600 - gpu_hours),
         MeasurementRecord("hole size error", error, "%")), findings, details, 20.0)


def with_leak(record: RunRecord, leak: dict[str, Any] | None) -> RunRecord:
    return RunRecord(**{**record.__dict__, "leak_report": leak})


def test_the_run_leak_report_shows_layers_and_ranked_holes_with_the_largest_in_words() -> None:
    scenarios = (leak_scenario("dataPipeline", "data pipeline", "PASS", "dataPipeline", 0.0135, 1.25),
                 leak_scenario("fragmentation", "fragmentation", "FAIL", "dataPipeline", 0.0131, 1.75))
    record = with_leak(make_record(scenarios), {
        "window": {"start": "2026-11-30T02:07:34Z", "end": "2026-11-30T02:09:10Z"},
        "source": {"kind": "apiserver", "where": "the target's API server"}, "report": LEAK_REPORT})
    html = render_report(record, SIG)
    assert 'href="#leaks"' in html
    part = section(html, "leak-report")
    assert "The largest hole is fault tolerance: 0.021 GPU-h, 2.46 % of healthy capacity." in part
    layers = re.search(r'data-testid="leak-layers".*?</table>', part, re.S).group(0)
    assert re.findall(r'data-layer="(\w+)"', layers) == ["allocated", "active", "effective"]
    assert "0.32 GPU-h" in layers and "37.5 %" in layers and "9.38 %" in layers
    holes = re.search(r'data-testid="leak-holes".*?</table>', part, re.S).group(0)
    assert re.findall(r'data-hole="(\w+)"', holes) == ["faultTolerance", "dataPipeline", "fragmentation",
                                                      "communication"]
    assert re.search(r'data-hole="faultTolerance" class="largest"', holes)
    assert holes.count('class="largest"') == 1
    rows = re.search(r'data-testid="leak-scenarios".*?</table>', part, re.S).group(0)
    frag = re.search(r"<tr id=\"leak-[^\"]*fragmentation[^\"]*\">(.*?)</tr>", rows, re.S).group(1)
    assert "<b>fragmentation</b>" in frag and "0.01333 GPU-h" in frag and "data pipeline" in frag
    assert "0.0131 GPU-h" in frag and "1.75 %" in frag and "FAIL" in frag
    assert "the configured leak report URL http://127.0.0.1:1/x" in part


def test_a_leak_report_that_could_not_be_read_says_why() -> None:
    record = with_leak(make_record((leak_scenario("dataPipeline", "data pipeline", "PASS", "dataPipeline",
                                                  0.0135, 1.25),)),
                       {"source": {"kind": "apiserver", "where": "x"}, "error": "answered 404; set leakReport.url"})
    part = section(render_report(record, SIG), "leak-report")
    assert "could not be read: answered 404; set leakReport.url" in part
    assert 'data-testid="leak-holes"' not in part


def test_no_leak_section_without_a_report_or_a_leak_scenario() -> None:
    html = render_report(with_leak(make_record(), {"source": {}, "error": "404"}), SIG)
    assert 'id="leaks"' not in html and 'href="#leaks"' not in html


def test_leak_names_are_escaped() -> None:
    evil = dict(LEAK_REPORT, holes=[dict(h, words="<script>alert(1)</script>") for h in LEAK_REPORT["holes"]])
    record = with_leak(make_record(), {"source": {"where": "<img src=x>"}, "report": evil})
    html = render_report(record, SIG)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x>" not in html


def test_a_record_with_a_leak_report_survives_the_json_round_trip() -> None:
    record = with_leak(make_record(), {"source": {"where": "api"}, "report": LEAK_REPORT})
    again = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.leak_report == record.leak_report
    assert render_report(again, SIG) == render_report(record, SIG)


# ------------------------------------------------------------------------------ load through the act


def serving_drain(*, series: bool = True, node: str = "gpu-node-1") -> ScenarioRecord:
    """A drained replica's node under steady load, shaped like a real run's details: the second after the drain
    has 2 requests failed and 3 lost; the Ready count drops at the act and comes back."""
    rows = [{"t": float(t), "sent": 60, "answered": 60, "failed": 0, "lost": 0, "p99_ttft_s": 0.057}
            for t in range(-3, 8)]
    rows[3] = {"t": 0.0, "sent": 60, "answered": 55, "failed": 2, "lost": 3, "p99_ttft_s": 0.41}
    rows[4] = {"t": 1.0, "sent": 4, "answered": 0, "failed": 0, "lost": 4, "p99_ttft_s": None}
    details: dict[str, Any] = {
        "act": {"kind": "drain", "node": node, "evicted": ["infer-fd-46nrd"]},
        "service": {"name": "infer-fd", "replicas": 3, "gpus_per_replica": 8, "nodes": ["gpu-node-1"]},
        "load": {"users": 12, "retries": 2, "retry_on": "no status line, 429, 503"},
        "requests": {"sent": 604, "answered": 595, "failed": 2, "lost": 7, "retried": 5, "locust_total": 604},
        "replicas_ready": [{"t": -4.2, "ready": 0}, {"t": -3.05, "ready": 1}, {"t": -3.02, "ready": 3},
                           {"t": 0.009, "ready": 2}, {"t": 1.16, "ready": 3}]}
    if series:
        details["series"] = rows
    lost = 7.0
    return ScenarioRecord(
        "Inference under chaos", "inference_under_chaos.feature",
        "Inference keeps its SLA while the node of one replica is drained", ("clause:9.1",), "serving", "FAIL",
        judgements=(judged("p99 time to first token", 0.41, 1.0), judged("requests lost", lost, 0.0, "requests")),
        measurements=(MeasurementRecord("p99 time to first token", 0.41, "s"),
                      MeasurementRecord("requests lost", lost, "requests")),
        details=details)


def control_plane_pull() -> ScenarioRecord:
    rows = [{"t": float(t), "sent": 100, "answered": 100, "failed": 0, "lost": 0, "p99_latency_s": 0.07}
            for t in range(-2, 5)]
    rows[2] = {"t": 0.0, "sent": 100, "answered": 98, "failed": 1, "lost": 1, "p99_latency_s": 0.19}
    return ScenarioRecord(
        "The control plane under chaos", "control_plane_under_chaos.feature",
        "The control plane holds its SLOs while a node is pulled", ("clause:9.4",), "control-plane", "PASS",
        judgements=(judged("mutating API call p99", 0.19, 1.0),),
        measurements=(MeasurementRecord("mutating API call p99", 0.19, "s"),),
        details={"act": {"kind": "pull", "node": "gpu-node-0", "method": "kill", "confirmed": True},
                 "load": {"users": 4, "object": "pod (Pending)"}, "startup": {"per_second": 2},
                 "requests": {"mutating": 700, "mutating_not_answered": 2, "reads": 400, "acknowledged_creates": 350,
                              "acknowledged_missing": []},
                 "series": rows})


def test_a_serving_scenario_gets_latency_over_time_with_the_act_losses_and_scale_events() -> None:
    html = render_report(make_record((serving_drain(),)), SIG)
    charts = svgs(html, "load-chart")
    assert len(charts) == 1
    chart = charts[0]
    assert 'data-testid="act-marker"' in chart and ">drain of gpu-node-1</text>" in chart
    # a p99 point per second that had an answer (10 of 11; the second with nothing answered breaks the line)
    assert chart.count('<circle class="p99"') == 10
    assert chart.count('class="second"') == 11
    assert chart.count('<polyline class="p99-line"') == 2
    # failed and lost in their own colours, with counts, on the seconds they happened
    assert ">3 lost</text>" in chart and ">2 failed</text>" in chart and ">4 lost</text>" in chart
    assert chart.count('class="bar-lost"') == 2 and chart.count('class="bar-failed"') == 1
    # the scale events: the Ready count as a step line, down at the act and back up
    assert 'data-testid="replicas"' in chart and "Ready replicas 3 \u2192 2" in chart and "2 \u2192 3" in chart
    # the text alternative: a title, and a desc with the totals and the steps
    desc = re.search(r"<desc[^>]*>(.*?)</desc>", chart, re.S)
    assert desc is not None
    assert "drain of gpu-node-1 at 0 s: 604 requests sent, 595 answered, 2 failed, 7 lost" in desc.group(1)
    assert "failed or lost calls in 2 seconds" in desc.group(1)
    # the change at -4.2 s falls before the axis (from -4 s): its value is where the step line starts
    assert "at -4.2 s" not in desc.group(1)
    assert "Ready replicas 0 \u2192 1 at -3.05 s \u2192 3 at -3.02 s \u2192 2 at 0.009 s \u2192 3 at 1.16 s." \
        in desc.group(1)
    assert "<title" in chart and "seconds from the act" in chart
    totals = section(html, "load-totals")
    for what, n in (("requests sent", "604"), ("answered", "595"), ("failed", "2"), ("lost", "7"), ("retried", "5"),
                    ("locust&#39;s own request total", "604")):
        assert re.search(rf"<td>{what}[^<]*</td><td class=\"num\">{n}</td>", totals), what
    assert 'href="#load"' in html


def test_the_control_plane_chart_shows_mutating_latency_and_the_pull() -> None:
    html = render_report(make_record((control_plane_pull(), serving_drain(series=False))), SIG)
    charts = svgs(html, "load-chart")
    assert len(charts) == 1  # the serving scenario without a series gets a card and a note, no chart
    chart = charts[0]
    assert ">pull of gpu-node-0 with kill</text>" in chart and "p99 mutating call latency" in chart
    assert chart.count('<circle class="p99"') == 7 and 'data-testid="replicas"' not in chart
    assert ">1 lost</text>" in chart and ">1 failed</text>" in chart
    assert len(re.findall(r'data-testid="load-card"', html)) == 2
    assert "No per-second load series was recorded" in html
    totals = re.findall(r'<table class="phases" data-testid="load-totals">.*?</table>', html, re.S)
    assert re.search(r"<td>mutating calls sent</td><td class=\"num\">700</td>", totals[0])
    assert re.search(r"<td>lost \(sent, never answered\)</td><td class=\"num\">1</td>", totals[0])


def test_no_load_section_without_a_load_scenario_and_names_are_escaped() -> None:
    html = render_report(make_record((node_pull(),)), SIG)
    assert not svgs(html, "load-chart") and 'id="load"' not in html and 'href="#load"' not in html
    html = render_report(make_record((serving_drain(node="<img src=x>"),)), SIG)
    assert "<img" not in html and ">drain of &lt;img src=x&gt;</text>" in html


def test_a_record_with_a_load_series_survives_the_json_round_trip() -> None:
    record = make_record((serving_drain(), control_plane_pull()))
    again = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert render_report(again, SIG) == render_report(record, SIG)


def test_the_straggler_chart_draws_each_rank_per_run_with_its_instants() -> None:
    from drills.records.evidence.report import step_chart
    points = [{"t": t, "rank": r, "generation": g, "compute_s": c}
              for t, r, g, c in [(-0.5, 0, "a", 0.1), (0.5, 0, "a", 0.4), (-0.5, 1, "a", 0.1), (0.5, 1, "a", 0.1),
                                 (3.0, 0, "b", 0.1), (3.0, 1, "b", 0.1)]]
    chart = step_chart({"step_times": {"points": points}, "instants": {
        "fault": {"mono": 10.0}, "named": {"mono": 12.0}, "recovered": {"mono": 13.5}}})
    assert chart is not None
    assert [label for label, _, _ in chart.lines] == ["rank 0 (run 1)", "rank 0 (run 2)", "rank 1 (run 1)",
                                                      "rank 1 (run 2)"]
    assert [label for _, label in chart.marks] == ["fault", "named"]  # recovered falls after the last point
    assert chart.ticks[0].label == "-1 s"
    assert step_chart({}) is None


def test_a_series_may_name_its_own_value_caption_and_marks_as_the_campaign_and_the_blip_do() -> None:
    from drills.records.evidence.report import step_chart
    points = [{"t": t, "rank": 0, "generation": g, "step": s}
              for t, g, s in [(1.0, "a", 10), (9.0, "a", 90), (12.0, "b", 85), (20.0, "b", 165)]]
    chart = step_chart({"step_times": {"value": "step", "unit": "", "caption": "rank 0's step number",
                                       "marks": ["fault 1"],
                                       "points": points},
                        "instants": {"fault": {"mono": 100.0}, "fault 1": {"mono": 109.5}}})
    assert chart is not None and chart.caption == "rank 0's step number"
    assert [label for _, label in chart.marks] == ["fault 1"]
    assert [label for label, _, _ in chart.lines] == ["rank 0 (run 1)", "rank 0 (run 2)"]
    assert [label for _, label in chart.y_ticks][-1] == "200"  # step numbers, not seconds
