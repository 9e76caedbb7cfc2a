"""A customer's mistake in a feature file is a usage error (exit 2) at file:line saying how to fix it, found
before any platform starts; `firedrill run --dry-run` finds the same mistakes without a cluster (issue 18)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drills.bdd import steps as _steps  # noqa: F401 - registers the vocabulary
from drills.cli import app
from drills.scenario.vocabulary import SENTENCES, sentence_of

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()

# One bad value per step sentence that has placeholders: (keyword, text, placeholder, value, what the message
# must say about the value, what it must say to write instead).
BAD_VALUES = [
    ("Given", "the cluster has at least 0 schedulable GPU nodes with 8 free GPUs each", "nodes", "0",
     "a count must be at least 1", "write a whole number of at least 1"),
    ("Given", "a canary training job of 0 workers with 4 GPUs each, checkpointing every 5 steps", "n workers",
     "0 workers", "a job needs at least one worker", "write e.g. '1 worker' or '4 workers'"),
    ("Given", "the job has written a checkpoint within 60 secs", "duration", "60 secs", "unknown unit 'secs'",
     "write one of ms, millisecond, milliseconds, s, second, seconds, min, minute, minutes"),
    ("When", "I submit a gang of 4 workers with 0 GPUs each", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU", "write e.g. '1 GPU' or '4 GPUs'"),
    ("When", "I submit 0 gangs of 3 workers with 8 GPUs each at the same time, each running for 5 seconds",
     "n gangs", "0 gangs", "at least one gang", "write e.g. '1 gang' or '4 gangs'"),
    ("When", "I pull the node of worker 0 with reboot", "method", "reboot", "unknown fault method",
     "write one of kill, hang, partition, kubelet-stop, delete-node, command or 'the configured fault method'"),
    ("Then", "all workers are running within 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "every node the fault touched is back in service within 10 parsecs", "duration", "10 parsecs",
     "unknown unit 'parsecs'", "e.g. '5 seconds'"),
    ("Then", "exactly one gang runs whole within 30 sec while the others hold no GPU", "duration", "30 sec",
     "unknown unit 'sec'", "e.g. '5 seconds'"),
    ("Then", "every gang has run whole within 1 week", "duration", "1 week", "unknown unit 'week'",
     "write one of ms,"),
    ("Then", "partial-hold GPU-seconds stay at or below none", "number", "none", "not a number of 0 or more",
     "write digits, e.g. 0, 10 or 2.5"),
    ("When", "a gang of 2 workers with 8 GPUs each runs for 5 sec", "duration", "5 sec", "unknown unit 'sec'",
     "write one of ms,"),
    ("Then", "the waiting gang runs whole within 0 seconds, holding no GPU until then", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "the platform detects the failure within 5 parsecs", "duration", "5 parsecs", "unknown unit 'parsecs'",
     "write one of ms,"),
    ("Then", "the job's pods are off the failed node within 5 fortnights of detection", "duration", "5 fortnights",
     "unknown unit 'fortnights'", "write one of ms,"),
    ("Then", "the job runs again on healthy nodes within 0 ms of eviction", "duration", "0 ms", "a duration of zero",
     "write more than zero"),
    ("Then", "training resumes beyond the checkpoint within 10 weeks of replacement", "duration", "10 weeks",
     "unknown unit 'weeks'", "write one of ms,"),
    ("Then", "the whole recovery takes at most 20 sekunden", "duration", "20 sekunden", "unknown unit 'sekunden'",
     "write one of ms,"),
    ("Then", "at most -1 steps of work are lost", "limit", "-1", "not a whole number of 0 or more", "write 0, 1, 2"),
    ("Given", "a node of 2 B200 GPUs partitioned as MIG 7 x 1g.18gb", "model", "B200", "unknown GPU model",
     "write one of A100-40GB, A100-80GB, H100-80GB, H200 (or an alias: A100 = A100-40GB"),
    ("Given", "a node of one A100 GPU partitioned as MIG 7 x 1g.10gb", "layout", "MIG 7 x 1g.10gb",
     "7 x 1g.10gb on one A100-40GB GPU (A100 means A100-40GB): it holds at most 4",
     "write a layout one A100-40GB GPU can hold: MIG 7 x 1g.5gb, MIG 4 x 1g.10gb, MIG 3 x 2g.10gb, MIG 2 x 3g.20gb, "
     "MIG 1 x 4g.20gb, MIG 1 x 7g.40gb, or a mix of these profiles within 7 compute and 8 memory slices; or keep "
     "this layout on a model that holds it: A100-80GB, H100-80GB"),
    ("When", "every slice is filled with a tenant, up to 0 tenants", "count", "0", "a count must be at least 1",
     "at least 1"),
    ("Then", "0 tenants are running", "count", "0", "a count must be at least 1", "at least 1"),
    ("Then", "the other 0 tenants are refused by the scheduler", "count", "0", "a count must be at least 1",
     "at least 1"),
    ("Then", "the tenants affected are some of them", "words", "some of them", "unknown outcome",
     'write one of "only that tenant", "every tenant on that GPU", "no tenant"'),
    ("Then", "every slice of that GPU is out of service within 3 fortnights", "duration", "3 fortnights",
     "unknown unit 'fortnights'", "write one of ms,"),
    ("Given", "a workload mix that leaks GPU time through memory for 12 seconds", "hole", "memory", "unknown hole",
     "write one of data pipeline, communication, fragmentation, fault tolerance"),
    ("Then", "it names the kitchen sink as the largest hole", "hole", "the kitchen sink", "unknown hole",
     "write one of data pipeline, communication, fragmentation, fault tolerance"),
    ("Then", "it sizes that hole within ten % of what was injected", "number", "ten", "not a number of 0 or more",
     "write digits"),
    ("Given", "an inference service of 0 replicas with 8 GPUs each behind a load balancer", "n replicas",
     "0 replicas", "a service needs at least one replica", "write e.g. '1 replica' or '4 replicas'"),
    ("Given", "steady load from 12 users who retry a refused request up to -1 times", "retries", "-1",
     "not a whole number of 0 or more", "write 0, 1, 2"),
    ("When", "the node of one replica is drained after 3 sec of load", "duration", "3 sec", "unknown unit 'sec'",
     "write one of ms,"),
    ("When", "the node of one replica is pulled with unplug after 3 seconds of load", "method", "unplug",
     "unknown fault method", "write one of kill, hang, partition"),
    ("When", "the load goes on for 0 seconds", "duration", "0 seconds", "a duration of zero", "write more than zero"),
    ("Then", "p99 time to first token stays within 1 jiffy", "duration", "1 jiffy", "unknown unit 'jiffy'",
     "write one of ms,"),
    ("Then", "at most one % of requests fail", "number", "one", "not a number of 0 or more", "write digits"),
    ("Then", "at most -2 requests are lost", "limit", "-2", "not a whole number of 0 or more", "write 0, 1, 2"),
    ("Given", "steady control-plane load from 0 users writing, listing and watching pods", "users", "0",
     "a count must be at least 1", "at least 1"),
    ("Given", "0 pods are started every second", "rate", "0", "a count must be at least 1", "at least 1"),
    ("Given", "the campaign's seed is -3", "seed", "-3", "not a whole number of 0 or more", "write 0, 1, 2"),
    ("When", "faults from the llama4 mix arrive every 20 seconds on average for 3 minutes", "mix", "llama4",
     "no fault mix 'llama4'", "name a mix in mixes/"),
    ("Then", "effective training time is at least 120 %", "share", "120 %",
     "not a percentage above 0 % and at most 100 %", "write e.g. '90 %'"),
    ("Then", "every fault is recovered automatically within 30 secs", "duration", "30 secs", "unknown unit 'secs'",
     "e.g. '5 seconds'"),
    ("Then", "at most -1 steps are lost per fault", "steps", "-1", "not a whole number of 0 or more",
     "write 0, 1, 2"),
    ("When", "the control plane is unreachable for 10 fortnights", "duration", "10 fortnights",
     "unknown unit 'fortnights'", "e.g. '5 seconds'"),
    ("When", "0 nodes, the job's among them, lose the control plane for 10 seconds", "n nodes", "0 nodes",
     "a step about nodes needs at least one", "write e.g. '1 node' or '4 nodes'"),
    ("Then", "training never pauses for more than 0 seconds during the outage", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "no pod of the job is evicted or restarted within 5 secs of the outage's end", "duration", "5 secs",
     "unknown unit 'secs'", "e.g. '5 seconds'"),
    ("Then", "every node is Ready again within 0 s of the outage's end", "duration", "0 s",
     "a duration of zero", "write more than zero"),
    ("When", "the GPU of worker -1 fails with Xid 79", "rank", "-1", "not a whole number of 0 or more",
     "write 0, 1, 2"),
    ("Given", "a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps, each checkpoint "
              "taking 0 seconds to write", "duration", "0 seconds", "a duration of zero", "write more than zero"),
    ("Given", "the platform restarts a job that makes no progress for 5 secs", "duration", "5 secs",
     "unknown unit 'secs'", "e.g. '5 seconds'"),
    ("When", "the GPU fails again with Xid 79 0 seconds after its return", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "the GPU returns to service within 5 secs of its burn-in passing", "duration", "5 secs",
     "unknown unit 'secs'", "e.g. '5 seconds'"),
    ("Then", "the GPU stays out of service for 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("When", "0 nodes away from the job report a fatal GPU fault at once", "n nodes", "0 nodes",
     "a step about nodes needs at least one", "write e.g. '1 node' or '4 nodes'"),
    ("Then", "the platform quarantines at most -1 of them", "most", "-1", "not a whole number of 0 or more",
     "write 0, 1, 2"),
    ("Then", "the platform says it stopped acting within 5 fortnights", "duration", "5 fortnights",
     "unknown unit 'fortnights'", "e.g. '5 seconds'"),
    ("Then", "the job trains on undisturbed for 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Given", "-1 single-GPU pods run on a node away from the job", "count", "-1", "not a whole number of 0 or more",
     "write 0, 1, 2"),
    ("Then", "the platform stops draining it within 2 parsecs of the fault clearing", "duration", "2 parsecs",
     "unknown unit 'parsecs'", "e.g. '5 seconds'"),
    ("Then", "at least -3 of its pods run on undisturbed", "count", "-3", "not a whole number of 0 or more",
     "write 0, 1, 2"),
    ("Then", "the node is schedulable again within 0 seconds of the fault clearing", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("When", "worker -2 hangs inside a step", "rank", "-2", "not a whole number of 0 or more", "write 0, 1, 2"),
    ("When", "the checkpoint storage stops answering for 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("When", "the job is writing a checkpoint and I pull the node of worker 0 with reboot", "method", "reboot",
     "unknown fault method", "write one of kill, hang, partition"),
    ("Then", "the platform names the hung job within 10 parsecs of the hang", "duration", "10 parsecs",
     "unknown unit 'parsecs'", "e.g. '5 seconds'"),
    ("Then", "the job runs again within 0 seconds of the naming", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "training resumes beyond the checkpoint within 10 secs of the restart", "duration", "10 secs",
     "unknown unit 'secs'", "e.g. '5 seconds'"),
    ("Then", "the job is not restarted for 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "the checkpoint completes and training goes on within 5 fortnights of the storage answering again",
     "duration", "5 fortnights", "unknown unit 'fortnights'", "write one of ms,"),
    ("When", "the GPU of worker 0 slows to 100 % of its speed", "speed", "100 %",
     "a percentage must be above 0 % and below 100 %", "write e.g. '25 %'"),
    ("When", "every worker waits 300 parsecs longer for its input each step", "duration", "300 parsecs",
     "unknown unit 'parsecs'", "write one of ms,"),
    ("Then", "the platform names the slow node within 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "the job's step time is back within twenty % of its pre-fault median within 60 seconds of the fault",
     "tolerance", "twenty %", "not a percentage", "write a number and %"),
    ("Then", "the job's step time is back within 20 % of its pre-fault median within 0 seconds of the naming",
     "duration", "0 seconds", "a duration of zero", "write more than zero"),
    ("Then", "no node is named for 20 fortnights", "duration", "20 fortnights", "unknown unit 'fortnights'",
     "write one of ms,"),
    ("Then", "the worker's pod is off the GPU within 3 sec", "duration", "3 sec", "unknown unit 'sec'",
     "write one of ms,"),
    ("Then", "the job runs again on healthy GPUs within 0 seconds of that", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "the GPU stays in service for 5 jiffies", "duration", "5 jiffies", "unknown unit 'jiffies'",
     "write one of ms,"),
    ("Given", "2 pods of 0 GPUs each are started every second, each running for 5 seconds", "n GPUs", "0 GPUs",
     "a GPU pod asks for at least one GPU", "write e.g. '1 GPU' or '4 GPUs'"),
    ("When", "a node is pulled with yank after 3 seconds of load", "method", "yank", "unknown fault method",
     "write one of kill, hang, partition"),
    ("Then", "mutating API calls have a p99 latency within 1 sec", "duration", "1 sec", "unknown unit 'sec'",
     "write one of ms,"),
    ("Then", "pod startup has a p99 latency within 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Given", "an inference service of 2 replicas with 8 GPUs each behind a load balancer, scaling out to 4 replicas "
              "when more than 2 requests wait per replica, each new replica loading its model for 2 weeks", "duration",
     "2 weeks", "unknown unit 'weeks'", "write one of ms,"),
    ("When", "the load jumps to 1 times its users after 3 seconds of load", "factor", "1",
     "a jump to 1 times the users is no jump", "write 2 or more"),
    ("Then", "a new replica serves within 10 lightyears of the queue crossing its threshold", "duration",
     "10 lightyears", "unknown unit 'lightyears'", "write one of ms,"),
    ("Then", "p99 time to first token is back within 0.5 seconds no later than 0 seconds after the jump", "duration",
     "0 seconds", "a duration of zero", "write more than zero"),
    ("Given", "an inference service of 4 replicas with 8 GPUs each behind a load balancer, scaling out to 4 replicas "
              "when more than 2 requests wait per replica, each new replica loading its model for 2 seconds", "most",
     "4", "the service already has 4 replicas, so it cannot scale out to 4", "write more than 4"),
    ("Given", "the service scales in 15 parsecs after its queue empties", "duration", "15 parsecs",
     "unknown unit 'parsecs'", "write one of ms,"),
    ("Given", "low-priority canary training of 0 workers with 8 GPUs each fills the idle GPUs, checkpointing every "
              "20 steps and when preempted", "n workers", "0 workers", "a job needs at least one worker",
     "write e.g. '1 worker' or '4 workers'"),
    ("When", "the burst ends after 0 seconds", "duration", "0 seconds", "a duration of zero", "write more than zero"),
    ("Then", "training resumes from the checkpoint it wrote when preempted within 20 sec of the burst's end",
     "duration", "20 sec", "unknown unit 'sec'", "write one of ms,"),
    ("Then", "at most five GPU-seconds of training are lost", "number", "five", "not a number of 0 or more",
     "write digits"),
    ("Given", "steady load from 12 users who retry a refused request up to 2 times, giving up on a silent server "
              "after 1 eon", "duration", "1 eon", "unknown unit 'eon'", "write one of ms,"),
    ("Then", "p99 time to first token is back within 0.5 seconds no later than 0 seconds after the pull", "duration",
     "0 seconds", "a duration of zero", "write more than zero"),
    ("Given", 'the signed baseline "before.txt"', "path", "before.txt", "not a baseline statement file",
     "name the .json file"),
    ("Then", "bogus utilization improves by at least 5 points over the signed baseline", "layer", "bogus",
     "unknown utilization layer", "write allocated, active or effective"),
    ("Then", "the storage hole shrinks by at least 1 GPU-hours over the signed baseline", "hole", "storage",
     "unknown hole", "write one of data pipeline"),
    ("Then", "nothing over the quota runs within 5 secs", "duration", "5 secs", "unknown unit 'secs'",
     "write one of ms,"),
    ("Then", "the pod of the higher class keeps running for 0 seconds", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "the billing gate stopped every attempt and the audit log holds a record of each refusal", "chain",
     "billing", "no such control chain", "write one of admission-and-quota, access, priority, change-control"),
    ("Given", "a gang of 0 workers with 8 GPUs each runs a collective", "n workers", "0 workers",
     "a job needs at least one worker", "write e.g. '1 worker'"),
    ("Then", "every node's collective bandwidth is at least 5 mb/s", "floor", "5 mb/s", "unknown unit 'mb/s'",
     "write bytes per second as B/s"),
    ("Then", "no node's collective bandwidth is more than 100 % below the median node's", "margin", "100 %",
     "a percentage must be above 0 % and below 100 %", "write e.g. '25 %'"),
    ("Given", "a rack is the set of nodes that share the label the rack", "label", "the rack",
     "not a node label key", "write a label key such as cloud.provider.com/topology-rack"),
    ("Given", "the cluster has at least 0 racks with 16 free GPUs each", "count", "0", "a count must be at least 1",
     "at least 1"),
    ("Given", "another job holds 0 GPUs on each node of one rack", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU", "write e.g. '1 GPU' or '4 GPUs'"),
    ("Given", "another job holds 4 GPUs on each node of every rack for 4 secs", "duration", "4 secs",
     "unknown unit 'secs'", "write one of ms,"),
    ("When", "I submit a gang of 0 workers with 4 GPUs each that must stay inside one rack", "n workers",
     "0 workers", "a job needs at least one worker", "write e.g. '1 worker' or '4 workers'"),
    ("Then", "every worker runs inside one rack within 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "the gang places no pod and holds no GPU for 3 secs", "duration", "3 secs", "unknown unit 'secs'",
     "write one of ms,"),
    ("Then", "the gang places no pod and holds no GPU until a row frees up", "level", "row",
     "unknown topology level", "write one of 'rack', 'block', 'NVLink domain', 'zone'"),
    ("Then", "every worker runs inside one rack within 30 secs of a rack freeing up", "duration", "30 secs",
     "unknown unit 'secs'", "write one of ms,"),
    ("Given", "a canary training job of 2 workers with 8 GPUs each that must stay inside one row, checkpointing "
              "every 5 steps", "level", "row", "unknown topology level",
     "write one of 'rack', 'block', 'NVLink domain', 'zone'"),
    ("Then", "the job runs again inside one rack within 0 seconds of the pull", "duration", "0 seconds",
     "a duration of zero", "write more than zero"),
    ("Then", "every GPU of every node reports its utilization and memory within 10 secs", "duration", "10 secs",
     "unknown unit 'secs'", "write one of ms,"),
    ("When", "a canary computes on 0 GPUs of an idle node", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU",
     "write e.g. '1 GPU' or '4 GPUs'"),
    ("Given", "a canary holds 0 GPUs of an idle node", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU",
     "write e.g. '1 GPU' or '4 GPUs'"),
    ("Then", "that GPU's utilization rises above fifty % within 10 seconds", "number", "fifty",
     "not a number of 0 or more", "write digits"),
    ("Then", "no other GPU of that node rises above ten % meanwhile", "number", "ten", "not a number of 0 or more",
     "write digits"),
    ("When", "the drill injects Xid 0 on the canary's GPU", "xid", "0", "a count must be at least 1", "at least 1"),
    ("Then", "the metrics show that Xid on that GPU within 0 seconds", "duration", "0 seconds", "a duration of zero",
     "write more than zero"),
    ("Then", "that GPU's utilization changes at least 0 times within 10 seconds", "count", "0",
     "a count must be at least 1", "at least 1"),
    ("Given", "a GPU node with at least 0 GPUs free", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU", "write e.g. '1 GPU' or '4 GPUs'"),
    ("When", "a pod that requests 0 GPUs runs on that node", "n GPUs", "0 GPUs", "a GPU pod asks for at least one GPU",
     "write e.g. '1 GPU' or '4 GPUs'"),
    ("When", "17 pods that request 1 GPU each run side by side on that node", "count", "17",
     "more than 16 probe pods on one node", "write 2 to 16"),
    ("Then", "the pod sees at most -1 GPUs", "limit", "-1 GPUs", "not a number of GPUs of 0 or more",
     "write e.g. 'no GPU', '0 GPUs'"),
    ("Then", "the pod can open at most -2 GPUs", "limit", "-2 GPUs", "not a number of GPUs of 0 or more",
     "write e.g. 'no GPU', '0 GPUs'"),
    # beyond one per sentence: a range a step sets, and a MIG profile the model lacks
    ("Given", "a node of 17 H200 GPUs partitioned as MIG 7 x 1g.18gb", "gpus", "17", "a node of more than 16 GPUs",
     "write 1 to 16"),
    ("Given", "a node of one H100 GPU partitioned as MIG 7 x 1g.18gb", "layout", "MIG 7 x 1g.18gb",
     "MIG profile '1g.18gb' does not exist on H100-80GB (H100 means H100-80GB)",
     "or keep this layout on a model that holds it: H200"),
]


def test_the_table_has_a_bad_value_for_every_sentence_with_a_placeholder() -> None:
    covered = {sentence_of(text, keyword).shape.name for keyword, text, *_ in BAD_VALUES}  # type: ignore[union-attr]
    with_placeholders = {s.shape.name for s in SENTENCES if s.fields}
    assert with_placeholders - covered == set(), "add a bad value for each new sentence to BAD_VALUES"


@pytest.mark.parametrize("keyword, text, placeholder, value, problem, fix", BAD_VALUES,
                         ids=[f"{row[2]}:{row[3]}" for row in BAD_VALUES])
def test_a_bad_value_is_a_usage_error_at_its_line_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyword: str, text: str, placeholder: str, value: str,
        problem: str, fix: str) -> None:
    monkeypatch.chdir(tmp_path)  # anything a started platform would leave (.firedrill/, reports/) would land here
    features = tmp_path / "features"
    features.mkdir()
    path = features / "mine.feature"
    path.write_text(f"Feature: mine\n  Scenario: one bad value\n    {keyword} {text}\n")
    started = time.monotonic()
    result = runner.invoke(app, ["run", "--features", str(features)])
    assert result.exit_code == 2, result.output
    assert time.monotonic() - started < 10
    assert f"{path}:3: <{placeholder}> {value!r}: {problem}" in result.stderr, result.stderr
    assert fix in result.stderr, result.stderr
    assert "Starting:" not in result.output and "Target:" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features"], "nothing may be started or written"


def test_the_firedrill_command_exits_2_on_the_issue_s_layout_and_starts_nothing(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    path = features / "isolation.feature"
    path.write_text("Feature: isolation\n  Scenario: an A100 cut in seven\n"
                    "    Given a node of one A100 GPU partitioned as MIG 7 x 1g.10gb\n"
                    "    When every slice is filled with a tenant, up to 7 tenants\n"
                    "    Then 7 tenants are running\n")
    out = subprocess.run([sys.executable, "-c", "from drills.cli import main; main()", "run", "--features",
                          str(features)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{path}:3: <layout> 'MIG 7 x 1g.10gb': 7 x 1g.10gb on one A100-40GB GPU (A100 means A100-40GB)" \
        in out.stderr
    assert "HARNESS ERROR" not in out.stdout + out.stderr and "Starting:" not in out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features"]


def test_a_bad_value_from_an_examples_row_is_reported_at_that_row(tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    path = features / "outline.feature"
    path.write_text("Feature: outline\n  Scenario Outline: <model> cut as <layout>\n"
                    "    Given a node of one <model> GPU partitioned as <layout>\n"
                    "    When every slice is filled with a tenant, up to 0 tenants\n"
                    "    Examples:\n      | model | layout |\n      | H200 | MIG 7 x 1g.18gb |\n"
                    "      | A100 | MIG 7 x 1g.10gb |\n")
    result = runner.invoke(app, ["run", "--dry-run", "--features", str(features)])
    assert result.exit_code == 2, result.output
    errors = [ln.strip() for ln in result.stderr.splitlines() if str(path) in ln]
    assert len(errors) == 2, result.stderr  # the literal 0 once, not once per row; the H200 row is fine
    assert errors[0].startswith(f"{path}:4: <count> '0': a count must be at least 1")
    assert errors[1].startswith(f"{path}:8: <layout> 'MIG 7 x 1g.10gb'")
    assert 'in the Examples row for "Given a node of one <model> GPU partitioned as <layout>" at line 3' in errors[1]


def test_dry_run_passes_the_shipped_features_and_prints_their_plan() -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--features", str(REPO / "features")])
    assert result.exit_code == 0, result.output
    assert "Plan (dry run: nothing is started, created or pulled)" in result.stdout
    for name in ("gang_submission.feature", "leak_identification.feature", "node_pull.feature",
                 "partition_isolation.feature"):
        assert f"  {name}: " in result.stdout
    assert "a node of one H200 GPU partitioned as MIG 7 x 1g.18gb" in result.stdout
    assert "Starting:" not in result.stdout


def test_dry_run_on_a_broken_copy_names_every_mistake_at_its_line(tmp_path: Path) -> None:
    features = tmp_path / "features"
    shutil.copytree(REPO / "features", features)
    pull = features / "node_pull.feature"
    lines = pull.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "with the configured fault method" in ln)
    lines[at] = lines[at].replace("with the configured fault method", "with reboot")
    pull.write_text("\n".join(lines) + "\n")
    iso = features / "partition_isolation.feature"
    rows = iso.read_text().splitlines()
    row = next(i for i, ln in enumerate(rows) if ln.strip().startswith("| H200") and "MIG 7 x 1g.18gb" in ln)
    rows[row] = rows[row].replace("| H200     ", "| A100     ").replace("MIG 7 x 1g.18gb", "MIG 7 x 1g.10gb")
    iso.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["run", "--dry-run", "--features", str(features)])
    assert result.exit_code == 2, result.output
    assert "Plan" not in result.stdout
    assert f"{pull}:{at + 1}: <method> 'reboot': unknown fault method; write one of kill" in result.stderr
    assert f"{iso}:{row + 1}: <layout> 'MIG 7 x 1g.10gb': 7 x 1g.10gb on one A100-40GB GPU" in result.stderr
    assert "error: the features cannot run (2 problem(s)):" in result.stderr


@pytest.mark.parametrize("steps, line, message", [
    (["Given a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps",
      "When I pull the node of worker 2 with kill"], 4,
     "<rank> '2': the canary job has 2 worker(s), ranked 0 to 1; write a rank from 0 to 1"),
    (["Given a node of one H100-80GB GPU partitioned as time-slicing x 2",
      "When every slice is filled with a tenant, up to 2 tenants",
      "And one tenant's slice takes a contained fault",
      "Then the tenants affected are only that tenant"], 6,
     "<words> 'only that tenant': after 'contained fault (Xid 94) on its slice' on a time-slicing node the contract "
     "promises 'every tenant on that GPU' (docs/PARTITIONING.md); write 'every tenant on that GPU'"),
    (["Given a node of one H200 GPU partitioned as MIG 7 x 1g.18gb",
      "Then the tenants affected are only that tenant"], 4,
     "<words> 'only that tenant': no probe before this step, so nothing to judge; put 'When one tenant exceeds"),
    (["Given an inference service of 3 replicas with 8 GPUs each behind a load balancer",
      "And steady load from 12 users who retry a refused request up to 2 times",
      "When the node of one replica is drained after 3 seconds of load",
      "Then at most 0 requests are lost"], 6,
     "'at most 0 requests are lost': the load is still running here, so there is nothing to judge yet; put "
     "'When the load goes on for <duration>' before it"),
    (["Given an inference service of 3 replicas with 8 GPUs each behind a load balancer",
      "And steady load from 12 users who retry a refused request up to 2 times",
      "When the load jumps to 4 times its users after 3 seconds of load",
      "And the load goes on for 10 seconds",
      "Then a new replica serves within 10 seconds of the queue crossing its threshold"], 7,
     "'a new replica serves within 10 seconds of the queue crossing its threshold': no autoscaled service, so no "
     "new replica is due; put 'Given an inference service of ..., scaling out to ...' first"),
    (["Given the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each",
      "When I submit a gang of 4 workers with 8 GPUs each",
      "And a gang of 2 workers with 8 GPUs each runs for 5 seconds",
      "Then the waiting gang runs whole within 30 seconds, holding no GPU until then"], 6,
     "'the waiting gang runs whole within 30 seconds, holding no GPU until then': no gang waits in this scenario; "
     "put 'When a gang of ... runs for ...' and then 'And I submit a gang of ...' before it"),
    (["Given the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each",
      "When a gang of 2 workers with 8 GPUs each runs for 40 seconds",
      "And I submit a gang of 4 workers with 8 GPUs each",
      "Then the waiting gang runs whole within 30 seconds, holding no GPU until then"], 6,
     "<duration> '30 seconds': the waiting gang can run only after the running gang's 40 s are up, and its window "
     "runs from its submission; write a window longer than 40 seconds, e.g. 70 seconds"),
    (["Given an inference service of 2 replicas with 8 GPUs each behind a load balancer, scaling out to 4 replicas "
      "when more than 2 requests wait per replica, each new replica loading its model for 20 seconds",
      "And steady load from 12 users who retry a refused request up to 2 times",
      "When the load jumps to 4 times its users after 3 seconds of load",
      "And the load goes on for 10 seconds",
      "Then a new replica serves within 10 seconds of the queue crossing its threshold"], 7,
     "<duration> '10 seconds': a new replica loads its model for 20 s before it can serve, and the window starts "
     "when the queue crosses the threshold; write a window longer than 20 seconds, e.g. 30 seconds"),
    (["Given steady control-plane load from 4 users writing, listing and watching pods",
      "When a node is pulled with kill after 3 seconds of load",
      "And the load goes on for 10 seconds",
      "Then pod startup has a p99 latency within 5 seconds"], 6,
     "'pod startup has a p99 latency within 5 seconds': no pods are started to time; put 'Given <rate> pods are "
     "started every second' first"),
])
def test_a_value_an_earlier_step_decides_is_checked_too(tmp_path: Path, steps: list[str], line: int,
                                                         message: str) -> None:
    features = tmp_path / "features"
    features.mkdir()
    path = features / "mine.feature"
    path.write_text("Feature: mine\n  Scenario: depends on an earlier step\n"
                    + "".join(f"    {s}\n" for s in steps))
    result = runner.invoke(app, ["run", "--features", str(features), "--reports", str(tmp_path / "reports")])
    assert result.exit_code == 2, result.output
    assert f"{path}:{line}: {message}" in result.stderr, result.stderr
    assert "Starting:" not in result.stdout and not (tmp_path / "reports").exists()


def test_a_node_on_the_cluster_is_judged_when_the_scenario_runs() -> None:
    """'Given a partitioned node' reads its mode from the cluster: any outcome words pass the check."""
    from drills.scenario.vocabulary import Checked, check_scenario
    steps = [Checked("any_partitioned_node", {}), Checked("contained_probe", {}),
             Checked("tenants_affected", {"words": "only that tenant"})]
    assert check_scenario(steps) == []


def test_every_shipped_step_binds_to_one_step_function_that_receives_the_checked_values() -> None:
    """What pytest-bdd does when the scenario runs (the converting parser of each step definition) agrees with the
    check: one definition matches each shipped step, and it receives the values the check returned."""
    from drills.scenario.vocabulary import check
    from drills.bdd.features import load_features

    seen = 0
    for feature in load_features(REPO / "features"):
        for scenario in feature.scenarios:
            for text in scenario.steps:
                bound = [s for s in SENTENCES if s.parser.is_matching(text)]
                assert len(bound) == 1, text
                assert bound[0].parser.parse_arguments(text) == check(text, bound[0].keyword), text
                seen += 1
    assert seen > 50
