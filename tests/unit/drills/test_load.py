"""The load generator's pure parts: samples, counts, percentiles, locust's files, the command locust gets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from drills.errors import FiredrillError
from drills.load.run import (LOCUSTFILE, LoadError, LoadRun, LoadSpec, LoadUser, Outcome, between, check_reachable,
                             locust_command, locust_env, nearest_rank, parse_locust_csv, parse_locust_json,
                             parse_sample, parse_samples, percentiles, summarize, totals)


def line(request_id: str, kind: str = "inference", start: float = 100.0, end: float = 100.5,
         outcome: str = "answered", ttft: float | None = 0.05, status: int | None = 200, **extra: object) -> str:
    return json.dumps({"request_id": request_id, "kind": kind, "start_wall": 1.7e9 + start, "start_mono": start,
                       "ttft_s": ttft, "end_mono": end, "latency_s": end - start, "status": status,
                       "outcome": outcome, "error": None if outcome == "answered" else "boom", **extra})


def test_the_harness_side_never_imports_locust() -> None:
    # importing drills.load.run (above) must not pull locust, and with it gevent's monkey-patching, into pytest
    assert "locust" not in sys.modules and "gevent" not in sys.modules


def test_a_sample_line_is_read_with_its_outcome_and_times() -> None:
    s = parse_sample(line("r1", start=10.0, end=10.25, ttft=0.05, object="cm-1"))
    assert (s.request_id, s.kind, s.outcome, s.status) == ("r1", "inference", Outcome.ANSWERED, 200)
    assert s.latency_s == pytest.approx(0.25) and s.ttft_s == 0.05 and s.object_name == "cm-1"
    lost = parse_sample(line("r2", outcome="lost", ttft=None, status=None))
    assert lost.outcome is Outcome.LOST and lost.ttft_s is None and lost.status is None and lost.error == "boom"
    assert s.attempts == 1  # a line without attempts: sent once
    assert parse_sample(json.dumps({**json.loads(line("r3")), "attempts": 3})).attempts == 3


@pytest.mark.parametrize(("text", "problem"), [
    ("not json", "not a JSON line"),
    ("[1, 2]", "expected a JSON object"),
    (line("", kind="inference"), "'request_id'"),
    (line("r", outcome="maybe"), "outcome 'maybe' is not one of answered, failed, lost"),
    (line("r", start=5.0, end=4.0), "end_mono 4.0 is before start_mono 5.0"),
    (line("r", status="200"), "'status' is '200'"),  # type: ignore[arg-type]
    (json.dumps({"request_id": "r", "kind": "inference", "outcome": "answered", "start_mono": "x"}),
     "'start_mono' is 'x', expected a number"),
])
def test_a_bad_sample_line_names_where_and_why(text: str, problem: str) -> None:
    with pytest.raises(LoadError, match="samples.jsonl:3: ") as exc:
        parse_samples(line("a") + "\n" + line("b") + "\n" + text + "\n", "samples.jsonl")
    assert problem in str(exc.value)
    assert isinstance(exc.value, FiredrillError)


def test_a_last_line_still_being_written_is_skipped_not_refused() -> None:
    text = line("a") + "\n\n" + line("b") + "\n" + line("c")[:30]
    assert [s.request_id for s in parse_samples(text)] == ["a", "b"]


def test_lost_is_sent_minus_answered_minus_failed() -> None:
    samples = parse_samples("".join(line(f"r{i}", outcome=o) + "\n" for i, o in enumerate(
        ["answered"] * 7 + ["failed"] * 2 + ["lost"])))
    t = totals(samples)
    assert (t.sent, t.answered, t.failed, t.lost) == (10, 7, 2, 1)
    assert t.error_rate == pytest.approx(0.3)
    assert totals([]).error_rate == 0.0


def test_nearest_rank_percentiles_are_measured_values() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted
    assert (nearest_rank(values, 50), nearest_rank(values, 95), nearest_rank(values, 99)) == (50.0, 95.0, 99.0)
    assert nearest_rank([3.0, 1.0, 2.0], 50) == 2.0
    assert nearest_rank([7.0], 99) == 7.0
    assert nearest_rank([1.0, 2.0], 99) == 2.0 and nearest_rank([1.0, 2.0], 50) == 1.0
    p = percentiles([0.1] * 98 + [5.0, 9.0])
    assert p is not None and (p.count, p.p50, p.p95, p.p99, p.max) == (100, 0.1, 0.1, 5.0, 9.0)
    assert percentiles([]) is None
    with pytest.raises(LoadError, match="no values"):
        nearest_rank([], 50)
    with pytest.raises(LoadError, match="percentile 0"):
        nearest_rank([1.0], 0)


def test_summaries_per_kind_take_percentiles_of_answered_requests_only() -> None:
    text = "".join([line("i1", start=0, end=1.0, ttft=0.1) + "\n", line("i2", start=0, end=3.0, ttft=0.3) + "\n",
                    line("i3", start=0, end=60.0, ttft=None, outcome="lost", status=None) + "\n",
                    line("c1", kind="k8s-create", start=0, end=0.2, ttft=None, status=201) + "\n",
                    line("c2", kind="k8s-create", start=0, end=0.4, ttft=None, outcome="failed", status=500) + "\n"])
    inference, create = summarize(parse_samples(text))
    assert inference.kind == "inference" and (inference.totals.sent, inference.totals.lost) == (3, 1)
    assert inference.latency is not None and inference.latency.max == 3.0  # the lost 60 s request is not a latency
    assert inference.ttft is not None and (inference.ttft.p50, inference.ttft.p99) == (0.1, 0.3)
    assert create.kind == "k8s-create" and create.totals.failed == 1 and create.ttft is None
    assert create.latency is not None and create.latency.count == 1 and create.latency.p99 == pytest.approx(0.2)


def test_a_window_around_a_fault_takes_requests_started_in_it() -> None:
    samples = parse_samples("".join(line(f"r{t}", start=float(t), end=t + 0.5) + "\n" for t in range(10)))
    assert [s.request_id for s in between(samples, 3.0, 6.0)] == ["r3", "r4", "r5"]


STATS_CSV = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
    "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%\n"
    "POST,/v1/completions,42,1,132.7,138.1,132.7,203.1,589.0,21.3,0.0,130,130,140,140,150,150,200,200,200,200,200\n"
    ",Aggregated,42,1,132.7,138.1,132.7,203.1,589.0,21.3,0.0,130,130,140,140,150,160,200,210,200,200,200\n")


def test_locust_csv_aggregated_row() -> None:
    agg = parse_locust_csv(STATS_CSV)
    assert (agg.requests, agg.failures, agg.median_ms, agg.p95_ms, agg.p99_ms) == (42, 1, 130.0, 160.0, 210.0)
    assert agg.requests_per_s == pytest.approx(21.3)
    assert parse_locust_csv(STATS_CSV.replace(",160,", ",N/A,")).p95_ms is None
    with pytest.raises(LoadError, match="no 'Aggregated' row"):
        parse_locust_csv(STATS_CSV.split("\n", 2)[0] + "\n" + STATS_CSV.split("\n")[1] + "\n", "x.csv")
    with pytest.raises(LoadError, match="x.csv: Aggregated '99%' is 'fast'"):
        parse_locust_csv(STATS_CSV.replace(",210,", ",fast,"), "x.csv")


def test_locust_json_totals_sum_every_entry() -> None:
    entries = [{"name": "/v1/completions", "num_requests": 63, "num_failures": 2},
               {"name": "create configmap", "num_requests": 10, "num_failures": 0}]
    assert parse_locust_json(json.dumps(entries)) == (73, 2)
    with pytest.raises(LoadError, match="r.json: entry 1 has no integer num_requests"):
        parse_locust_json(json.dumps([entries[0], {"name": "x"}]), "r.json")
    with pytest.raises(LoadError, match="not JSON"):
        parse_locust_json("{", "r.json")


def test_locust_is_started_headless_in_its_own_process_with_the_samples_file(tmp_path: Path) -> None:
    spec = LoadSpec(host="http://127.0.0.1:8000", out_dir=tmp_path, users=5, spawn_rate=2.5, duration_s=2.2,
                    user_classes=(LoadUser.INFERENCE, LoadUser.CONTROL_PLANE), kubeconfig=tmp_path / "kc",
                    namespace="load", run_id="abc")
    cmd = locust_command(spec, python="py")
    assert cmd[:5] == ["py", "-m", "locust", "-f", str(LOCUSTFILE)] and LOCUSTFILE.name == "locustfile.py"
    flags = " ".join(cmd[5:])
    assert ("--headless -u 5 -r 2.5 -t 3s --host http://127.0.0.1:8000 --only-summary --loglevel ERROR "
            "--stop-timeout 10 ") in flags
    assert f"--csv {tmp_path / 'locust'} --json-file {tmp_path / 'locust'}" in flags
    assert cmd[-2:] == ["InferenceUser", "ControlPlaneUser"]
    env = locust_env(spec, base={"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["FIREDRILL_LOAD_SAMPLES"] == str(tmp_path / "samples.jsonl")
    assert (env["FIREDRILL_LOAD_RUN_ID"], env["FIREDRILL_LOAD_NAMESPACE"], env["FIREDRILL_LOAD_OBJECT"]) == \
        ("abc", "load", "configmap")
    assert env["FIREDRILL_LOAD_KUBECONFIG"] == str(tmp_path / "kc")
    assert (env["FIREDRILL_LOAD_RETRIES"], env["FIREDRILL_LOAD_RETRY_BACKOFF_S"]) == ("0", "0.1")
    assert env["FIREDRILL_LOAD_KEEPALIVE"] == "1"
    assert locust_env(LoadSpec(host="http://h:1", out_dir=tmp_path, keep_alive=False))["FIREDRILL_LOAD_KEEPALIVE"] \
        == "0"


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"users": 0}, "users=0"),
    ({"duration_s": 0}, "duration_s=0"),
    ({"user_classes": ()}, "user_classes is empty"),
    ({"user_classes": (LoadUser.CONTROL_PLANE,)}, "needs a kubeconfig"),
    ({"k8s_object": "secret", "kubeconfig": Path("kc")}, "k8s_object='secret'"),
    ({"retries": -1}, "retries=-1"),
])
def test_a_bad_spec_is_refused_saying_what(tmp_path: Path, kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(LoadError, match=problem):
        LoadSpec(host="http://127.0.0.1:1", out_dir=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_an_unreachable_host_is_a_clear_error() -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LoadError, match=f"load host http://127.0.0.1:{port} is unreachable"):
        check_reachable(f"http://127.0.0.1:{port}", timeout_s=1.0)
    with pytest.raises(LoadError, match="is not an http"):
        check_reachable("127.0.0.1:80")


def test_the_evidence_records_the_command_without_this_machines_paths(tmp_path: Path) -> None:
    spec = LoadSpec(host="http://127.0.0.1:8000", out_dir=tmp_path / "load", users=2, run_id="abc")
    run = LoadRun.__new__(LoadRun)  # the command only: nothing is started
    run.spec, run.command = spec, tuple(locust_command(spec))
    words = run.portable_command()
    assert words.startswith("python -m locust -f drills/load/locustfile.py --headless -u 2 ")
    assert "$LOAD_DIR/locust" in words and str(tmp_path) not in words and sys.executable not in words
