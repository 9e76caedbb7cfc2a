"""Step definitions: thin sentences over the drills.  Loaded as a pytest plugin by ``firedrill run``.

Each step parses its numbers and units and calls a drill; the judging of
thresholds happens in :class:`drills.verdict.DrillResult`, and the verdict is
delivered after the scenario's last step (so every threshold is judged, not
just the first that misses).  Every placeholder is typed (``{nodes:Count}``,
``{limit:Duration}``, ...): its parser in :mod:`drills.bdd.vocabulary` and a
step's ``check`` are the rules ``firedrill run`` checks every feature file
against before it starts anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from drills.bdd.context import ScenarioContext
from drills.bdd.vocabulary import Checked, scenario_rule, step
from drills.errors import PlaceholderError
from drills.governance import Chain, GovernanceDrill
from drills.isolation import PROBES, IsolationDrill, gpu_model, partition_config, promise
from drills.leak.model import Hole
from drills.serving import Autoscale
from drills.target import FaultMethod
from drills.verdict import Comparison, Measurement, Threshold

# Waiting longer than a threshold tells "missed by a little" from "never": each Then step
# observes for this many times its threshold, plus a fixed margin, before calling it never.
OBSERVE_FACTOR, OBSERVE_MARGIN = 2.0, 10.0
RUNNING_WITHIN = 60.0
"""Seconds a scenario's already-running gang ('When a gang of ... runs for ...') gets to run whole."""


def _window(limit: float) -> float:
    return limit * OBSERVE_FACTOR + OBSERVE_MARGIN


# ------------------------------------------------------------------ Given
@step("Given", "the cluster has at least {nodes:Count} schedulable GPU nodes with {gpus:Count} free GPUs each",
      "the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each")
def enough_capacity(drill: ScenarioContext, nodes: int, gpus: int) -> None:
    """Steady state before: the drill needs this much free capacity, or it is INCONCLUSIVE (it proves nothing)."""
    drill.gang_drill().steady_state_before(nodes, gpus)


@step("Given", "a canary training job of {workers:Workers} with {gpus:Count} GPUs each, "
               "checkpointing every {every:Count} steps",
      "a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps")
def canary_job(drill: ScenarioContext, workers: int, gpus: int, every: int) -> None:
    """Start the canary: a synchronous data-parallel job (one rank per worker) that checkpoints every N steps."""
    drill.node_pull_drill().start_canary(workers, gpus, every)


@step("Given", "the job has written a checkpoint within {limit:Duration}",
      "the job has written a checkpoint within 60 seconds")
def checkpoint_written(drill: ScenarioContext, limit: float) -> None:
    """Wait until the canary job has recorded a checkpoint (so resumption can be checked)."""
    drill.node_pull_drill().wait_checkpoint(limit)


# ------------------------------------------------------------------- When
@step("When", "I submit a gang of {workers:Count} workers with {gpus:Count} GPUs each",
      "I submit a gang of 4 workers with 8 GPUs each")
def submit_one_gang(drill: ScenarioContext, workers: int, gpus: int) -> None:
    """Submit one gang (all workers must be placed together)."""
    drill.gang_drill().submit(1, workers, gpus)


@step("When", "I submit {count:Count} gangs of {workers:Count} workers with {gpus:Count} GPUs each at the same time, "
              "each running for {duration:Duration}",
      "I submit 2 gangs of 3 workers with 8 GPUs each at the same time, each running for 5 seconds")
def submit_gangs(drill: ScenarioContext, count: int, workers: int, gpus: int, duration: float) -> None:
    """Submit several gangs together, their pods interleaved; each worker finishes after the given time."""
    drill.gang_drill().submit(count, workers, gpus, run_seconds=duration)


@step("When", "a gang of {workers:Count} workers with {gpus:Count} GPUs each runs for {duration:Duration}",
      "a gang of 2 workers with 8 GPUs each runs for 5 seconds")
def running_gang(drill: ScenarioContext, workers: int, gpus: int, duration: float) -> None:
    """A job already running: one gang whose workers finish after the given time.  The step returns once it runs
    whole, so a gang submitted next has to wait for it (INCONCLUSIVE if it never runs whole, or if the cluster has
    room for the next gang as well)."""
    drill.gang_drill().submit(1, workers, gpus, run_seconds=duration)
    drill.gang_drill().wait_running(RUNNING_WITHIN)


@step("When", "I pull the node of worker {rank:Whole} with {method:FaultMethod}",
      "I pull the node of worker 0 with kill")
def pull_node(drill: ScenarioContext, rank: int, method: FaultMethod | None) -> None:
    """Pull the node hosting a worker (ranks count from 0, below the canary job's worker count): kill, hang or
    partition (reference platform); kubelet-stop, delete-node or command (real clusters); or "the configured
    fault method" from the target profile."""
    drill.node_pull_drill().pull(rank, drill.target.profile.fault.method if method is None else method)


# ------------------------------------------------------------------- Then
@step("Then", "all workers are running within {limit:Duration}", "all workers are running within 30 seconds")
def all_running(drill: ScenarioContext, limit: float) -> None:
    """Every submitted gang has all its workers Running, measured from submission."""
    drill.gang_drill().wait_all_running(_window(limit))
    drill.result.check(Threshold("time to run whole", limit, "s"))


@step("Then", "exactly one gang runs whole within {limit:Duration} while the others hold no GPU",
      "exactly one gang runs whole within 30 seconds while the others hold no GPU")
def one_whole(drill: ScenarioContext, limit: float) -> None:
    """Contention: one gang gets all its GPUs; the others get none at all while it runs (no partial holds)."""
    drill.gang_drill().wait_one_whole_others_empty(_window(limit))
    drill.result.check(Threshold("time until one gang runs whole", limit, "s"))


@step("Then", "every gang has run whole within {limit:Duration}", "every gang has run whole within 60 seconds")
def every_whole(drill: ScenarioContext, limit: float) -> None:
    """Each gang eventually ran with all its workers (the waiting one after the first finished)."""
    drill.gang_drill().wait_all_ran_whole(_window(limit))
    drill.result.check(Threshold("time until every gang ran whole", limit, "s"))


@step("Then", "the waiting gang runs whole within {limit:Duration}, holding no GPU until then",
      "the waiting gang runs whole within 30 seconds, holding no GPU until then")
def waiting_gang_whole(drill: ScenarioContext, limit: float) -> None:
    """The gang submitted last, which had to wait for the running one, runs whole (measured from its submission);
    GPUs it held with fewer than minMember workers placed while it waited (a partial commit) are a FAIL that names
    them."""
    drill.gang_drill().wait_waiting_gang_whole(_window(limit))
    drill.result.check(Threshold("time until the waiting gang runs whole", limit, "s"))


@step("Then", "partial-hold GPU-seconds stay at or below {limit:Number}",
      "partial-hold GPU-seconds stay at or below 0")
def partial_hold(drill: ScenarioContext, limit: float) -> None:
    """GPUs held by gangs with fewer than minMember workers placed, integrated over time (episodes shorter
    than 1 s, the time to bind a gang pod by pod, count zero)."""
    drill.gang_drill().partial_hold()
    drill.result.check(Threshold("partial-hold GPU-seconds", limit, "GPU-s"))


@step("Then", "the platform detects the failure within {limit:Duration}",
      "the platform detects the failure within 5 seconds")
def detected(drill: ScenarioContext, limit: float) -> None:
    """detect = t_detect - t_fault: the node's Ready condition leaves True or an unreachable/not-ready taint appears."""
    _phase(drill, "detect", limit)


@step("Then", "the job's pods are off the failed node within {limit:Duration} of detection",
      "the job's pods are off the failed node within 5 seconds of detection")
def evicted(drill: ScenarioContext, limit: float) -> None:
    """evict = t_evict - t_detect: no pod of the job remains bound to the pulled node in a non-terminal phase."""
    _phase(drill, "evict", limit)


@step("Then", "the job runs again on healthy nodes within {limit:Duration} of eviction",
      "the job runs again on healthy nodes within 10 seconds of eviction")
def replaced(drill: ScenarioContext, limit: float) -> None:
    """replace = t_replace - t_evict: minMember pods Running again, all on healthy nodes."""
    _phase(drill, "replace", limit)


@step("Then", "training resumes beyond the checkpoint within {limit:Duration} of replacement",
      "training resumes beyond the checkpoint within 10 seconds of replacement")
def resumed(drill: ScenarioContext, limit: float) -> None:
    """resume = t_resume - t_replace: the workload reports a step beyond the checkpoint it resumed from."""
    _phase(drill, "resume", limit)


@step("Then", "the whole recovery takes at most {limit:Duration}", "the whole recovery takes at most 20 seconds")
def total(drill: ScenarioContext, limit: float) -> None:
    """total = t_resume - t_fault."""
    _phase(drill, "total", limit)


@step("Then", "at most {limit:Whole} steps of work are lost", "at most 10 steps of work are lost")
def lost_steps(drill: ScenarioContext, limit: int) -> None:
    """Steps done since the last checkpoint at the moment of the fault, which the job must redo."""
    drill.node_pull_drill().observe_until("resume", _window(60.0))
    drill.result.check(Threshold("lost steps", float(limit), "steps", Comparison.AT_MOST))


@step("Then", "no rank of the replaced job trains after the job resumes",
      "no rank of the replaced job trains after the job resumes")
def fenced(drill: ScenarioContext) -> None:
    """Split brain: for a few seconds after the resume, no pod of the job as it was at the fault may log a
    training step (the canary's own log); a partitioned node's old ranks must be fenced, not left training."""
    drill.node_pull_drill().judge_fenced()


def _phase(drill: ScenarioContext, phase: str, limit: float) -> None:
    drill.node_pull_drill().observe_until(phase, _window(limit))
    drill.result.check(Threshold(phase, limit, "s"))



# ------------------------------------------------------------ partition isolation (docs/PARTITIONING.md)
def _isolation(drill: ScenarioContext) -> IsolationDrill:
    """The scenario's isolation drill, created on first use; the scenario's rollback undoes it."""
    return drill.isolation_drill()


MAX_NODE_GPUS, MAX_TENANTS = 16, 128


def _node_of(gpus: int, model: str, layout: str) -> dict[str, Any]:
    """The partition config of a partitioned node's sentence (the model must hold the layout, docs/PARTITIONING.md)."""
    if gpus > MAX_NODE_GPUS:
        raise PlaceholderError(str(gpus), f"a node of more than {MAX_NODE_GPUS} GPUs",
                               f"write 1 to {MAX_NODE_GPUS}", placeholder="gpus")
    return partition_config(layout, model)


def _node_of_one(model: str, layout: str) -> dict[str, Any]:
    return partition_config(layout, model)


def _tenant_cap(count: int) -> None:
    if count > MAX_TENANTS:
        raise PlaceholderError(str(count), f"more than {MAX_TENANTS} tenants", f"write 1 to {MAX_TENANTS}",
                               placeholder="count")


@step("Given", "a node of {gpus:Count} {model} GPUs partitioned as {layout}",
      "a node of 2 H200 GPUs partitioned as MIG 7 x 1g.18gb", check=_node_of)
def partitioned_node(drill: ScenarioContext, gpus: int, model: str, layout: str) -> None:
    """Embedded platform: start an extra node of that many GPUs of that model, partitioned as described:
    `MIG 7 x 1g.18gb` (one profile), `MIG 3g.71gb + 2g.35gb + 1g.18gb + 1g.18gb` (a mixed layout, every
    GPU), `time-slicing x 4` or `HAMi x 4` (tenants per GPU); add `(isolation not enforced)` for a node
    that claims the mode but behaves like time-slicing. The node is stopped and deleted on rollback."""
    config = _node_of(gpus, model, layout)
    _isolation(drill).use_embedded_node(gpus, gpu_model(model), config)


@step("Given", "a node of one {model} GPU partitioned as {layout}",
      "a node of one H200 GPU partitioned as MIG 7 x 1g.18gb", check=_node_of_one)
def partitioned_node_one(drill: ScenarioContext, model: str, layout: str) -> None:
    """The same, with a single GPU (the layout descriptions are the same)."""
    config = _node_of_one(model, layout)
    _isolation(drill).use_embedded_node(1, gpu_model(model), config)


@step("Given", "a partitioned node", "a partitioned node")
def any_partitioned_node(drill: ScenarioContext) -> None:
    """A node the cluster already partitions: it carries the profile's allow label and
    `firedrill.dev/partition-mode` or NVIDIA's MIG or sharing labels; its layout is read from its labels
    and allocatable. None found: INCONCLUSIVE."""
    _isolation(drill).use_cluster_node()


@step("When", "every slice is filled with a tenant, up to {count:Count} tenants",
      "every slice is filled with a tenant, up to 7 tenants", check=_tenant_cap)
def fill_slices(drill: ScenarioContext, count: int) -> None:
    """Create idle probe tenants (pods asking for one slice each) on the node, up to that many; more than the
    node advertises checks that the scheduler refuses the surplus. The count actually running is measured,
    and each pod left Pending keeps the scheduler's FailedScheduling reason."""
    _tenant_cap(count)
    _isolation(drill).fill(count)


@step("When", "one tenant exceeds its memory share", "one tenant exceeds its memory share")
def memory_probe(drill: ScenarioContext) -> None:
    """One tenant is recreated using more memory than its slice has (`firedrill.dev/memory-mib`; on a real
    cluster its probe program allocates GPU memory until the driver refuses, docs/PROFILE.md); the killed
    tenants of an earlier probe are recreated first, so the probe starts from a full node."""
    _isolation(drill).run_probe("memory")


@step("When", "one tenant's slice takes a contained fault", "one tenant's slice takes a contained fault")
def contained_probe(drill: ScenarioContext) -> None:
    """A contained ECC error (Xid 94) on one tenant's slice (its MIG instance; its GPU otherwise), injected
    through the Node annotation `firedrill.dev/inject-xid` (real clusters: the profile's
    `fault.xid.command_template`, behind the safety checks; without one the probe is INCONCLUSIVE)."""
    _isolation(drill).run_probe("contained")


@step("When", "its GPU takes a reset-class fault", "its GPU takes a reset-class fault")
def reset_probe(drill: ScenarioContext) -> None:
    """A reset-class fault (Xid 79, the GPU fell off the bus) on the GPU of one tenant, injected as the
    contained fault is."""
    _isolation(drill).run_probe("reset")


@step("Then", "{count:Count} tenants are running", "7 tenants are running")
def tenants_running(drill: ScenarioContext, count: int) -> None:
    """Exactly that many probe tenants run on the node: fewer means slices the node advertises could not be
    used, more means the scheduler overcommitted the node."""
    drill.result.check(Threshold("tenants running", float(count), "tenants", Comparison.AT_LEAST))
    drill.result.check(Threshold("tenants running", float(count), "tenants", Comparison.AT_MOST))


@step("Then", "the other {count:Count} tenants are refused by the scheduler",
      "the other 2 tenants are refused by the scheduler")
def tenants_refused(drill: ScenarioContext, count: int) -> None:
    """That many tenants stay Pending, unbound, each with the scheduler's FailedScheduling reason."""
    iso = _isolation(drill)
    refused = iso.pending
    drill.result.measure(Measurement("tenants refused", float(len(refused)), "tenants",
                                     note="; ".join(f"{t}: {r}" for t, r in sorted(refused.items()))))
    drill.result.check(Threshold("tenants refused", float(count), "tenants", Comparison.AT_LEAST))
    drill.result.check(Threshold("tenants refused", float(count), "tenants", Comparison.AT_MOST))
    silent = [t for t, r in refused.items() if not r or r.startswith("left Pending")]
    if silent:
        drill.result.fail(f"the scheduler left {', '.join(sorted(silent))} Pending without saying why "
                          "(no FailedScheduling Event)")


@step("Then", "the tenants affected are {words:Outcome}", "the tenants affected are only that tenant")
def tenants_affected(drill: ScenarioContext, words: str) -> None:
    """Who failed in the last probe: `only that tenant`, `every tenant on that GPU` or `no tenant`. The words
    must be what the contract (docs/PARTITIONING.md) promises for the node's mode; any other tenant that
    failed escaped isolation (FAIL, named), and one that should have failed but survived is named too."""
    _isolation(drill).judge_last(words)


# ------------------------------------------------------------ leak identification (docs/LEAK_REPORT.md)
@step("Given", "a workload mix that leaks GPU time through {hole:Hole} for {seconds:Duration}",
      "a workload mix that leaks GPU time through data pipeline for 12 seconds")
def leaking_mix(drill: ScenarioContext, hole: Hole, seconds: float) -> None:
    """Open one hole of a known size, sized to the cluster's free GPUs: `data pipeline` (training ranks that
    wait on input half of each step), `communication` (half of each step stalled on collectives),
    `fragmentation` (every node keeps 2 GPUs free, one pod needs 4) or `fault tolerance` (the node of a
    training rank is pulled; the window then stays open until training resumes, plus 2 s). The window opens
    once the mix leaks steadily; the drill's own arithmetic of what it injected is the truth."""
    drill.leak_drill().inject(hole, seconds)


@step("When", "the platform's leak report is read for that window",
      "the platform's leak report is read for that window")
def leak_report_read(drill: ScenarioContext) -> None:
    """Read the leak report (docs/LEAK_REPORT.md) for the window, from the target's API server, the URL the
    target profile configures (`leakReport.url`), or computed from its Prometheus (`prometheus.url`: DCGM
    exporter and kube-state-metrics series; it cannot measure communication or fault tolerance, so those
    scenarios are INCONCLUSIVE there). A report that cannot be read makes the scenario INCONCLUSIVE and says
    how to configure a source; one that breaks the contract's shape FAILs."""
    drill.leak_drill().read()


@step("Then", "it names {hole:Hole} as the largest hole", "it names data pipeline as the largest hole")
def names_largest(drill: ScenarioContext, hole: Hole) -> None:
    """The report's `largest` must be the hole the drill opened; otherwise FAIL, naming the hole expected (and
    the GPU-hours injected) and the one the report named."""
    drill.leak_drill().judge_named(hole)


@step("Then", "it sizes that hole within {tolerance:Number} % of what was injected",
      "it sizes that hole within 10 % of what was injected")
def sizes_hole(drill: ScenarioContext, tolerance: float) -> None:
    """The report's size of the hole the scenario opened is within the tolerance of what was injected:
    the absolute difference over the injected GPU-hours, in percent, at most <number>."""
    leak = drill.leak_drill()
    if leak.hole is None:
        raise ValueError("no hole was opened in this scenario; start it with 'a workload mix that leaks GPU time "
                         "through <hole> for <duration>'")
    leak.judge_size(leak.hole, tolerance)


# ------------------------------------------------------------ serving under chaos (docs/STEPS.md, docs/LOAD.md)
@step("Given", "an inference service of {replicas:Count} replicas with {gpus:Whole} GPUs each behind a load balancer",
      "an inference service of 3 replicas with 8 GPUs each behind a load balancer")
def inference_service(drill: ScenarioContext, replicas: int, gpus: int) -> None:
    """A Deployment of inference canaries (`firedrill-inference serve`: streams tokens, reports vLLM's metrics,
    drains on SIGTERM), each asking for that many GPUs (so replicas of a whole node's GPUs land on different
    nodes), behind a Service of type LoadBalancer; waits until every replica is Ready and the Service has an
    address. None within 60 s: INCONCLUSIVE."""
    drill.serving_drill().deploy(replicas, gpus)


@step("Given", "an inference service of {replicas:Count} replicas with {gpus:Whole} GPUs each behind a load balancer, "
               "scaling out to {most:Count} replicas when more than {waiting:Count} requests wait per replica, each new "
               "replica loading its model for {warmup:Duration}",
      "an inference service of 2 replicas with 8 GPUs each behind a load balancer, scaling out to 4 replicas when more "
      "than 2 requests wait per replica, each new replica loading its model for 2 seconds",
      check=lambda replicas, gpus, most, waiting, warmup: _autoscale_range(replicas, most))
def autoscaled_service(drill: ScenarioContext, replicas: int, gpus: int, most: int, waiting: int,
                       warmup: float) -> None:
    """The inference service as above, with a HorizontalPodAutoscaler on the canary's own queue
    (`vllm:num_requests_waiting`, that many per replica on average) between the replicas given and the most;
    every replica answers 503 on /health (so is not Ready) until its model has loaded. Its model batches 4
    requests and takes 0.85 s for 16 tokens, so a burst queues (docs/SERVING.md)."""
    drill.serving_drill().deploy(replicas, gpus, Autoscale(most, waiting, warmup))


def _autoscale_range(replicas: int, most: int) -> None:
    if most <= replicas:
        raise PlaceholderError(str(most), f"the service already has {replicas} replicas, so it cannot scale out to "
                               f"{most}", f"write more than {replicas}", placeholder="most")


@step("Given", "the service scales in {window:Duration} after its queue empties",
      "the service scales in 5 seconds after its queue empties")
def scale_in_window(drill: ScenarioContext, window: float) -> None:
    """The autoscaler's scale-down stabilization window (upstream's default: 300 s): how long the queue must
    stay low before replicas are removed."""
    drill.serving_drill().scale_in_after(window)


@step("Given", "low-priority canary training of {workers:Workers} with {gpus:Count} GPUs each fills the idle GPUs, "
               "checkpointing every {every:Count} steps and when preempted",
      "low-priority canary training of 2 workers with 8 GPUs each fills the idle GPUs, checkpointing every 20 steps "
      "and when preempted")
def low_priority_training(drill: ScenarioContext, workers: int, gpus: int, every: int) -> None:
    """The training canary as a job at a PriorityClass below the default (the drill creates it, value -100,
    never preempting), so inference may preempt it; rank 0 checkpoints every that many steps and, when told to
    stop, at its last completed step (`--checkpoint-on-sigterm`). Waits until every rank trains."""
    drill.serving_drill().share_with_training(workers, gpus, every)


@step("Given", "steady load from {users:Count} users who retry a refused request up to {retries:Whole} times",
      "steady load from 12 users who retry a refused request up to 2 times")
def steady_load(drill: ScenarioContext, users: int, retries: int) -> None:
    """Locust's inference users stream completions through the Service's address, each starting its next
    request when one ends. The users' retry policy (docs/LOAD.md): a request refused before the server took it
    on (connection failed or closed before a status line, 429, 503) is sent again up to that many times; a
    stream cut short is never retried."""
    drill.serving_drill().start_load(users, retries)


@step("Given", "steady load from {users:Count} users who retry a refused request up to {retries:Whole} times, "
               "giving up on a silent server after {timeout:Duration}",
      "steady load from 12 users who retry a refused request up to 2 times, giving up on a silent server after "
      "1 second")
def steady_load_with_timeout(drill: ScenarioContext, users: int, retries: int, timeout: float) -> None:
    """As above, and a user that hears nothing from the server for that long (no status line, or no token)
    gives the attempt up: before a status line that is a refusal, retried under the same policy; mid-stream
    it is a lost request."""
    drill.serving_drill().start_load(users, retries, timeout)


@step("When", "the node of one replica is drained after {after:Duration} of load",
      "the node of one replica is drained after 3 seconds of load")
def drain_replica_node(drill: ScenarioContext, after: float) -> None:
    """Planned maintenance: the node of one replica is cordoned and the drill's pods on it are evicted through
    the Eviction API, as `kubectl drain` does (the node is uncordoned on rollback). The platform should stop
    routing to the replica and let it finish what it took on within its grace period."""
    drill.serving_drill().drain(after)


@step("When", "the node of one replica is pulled with {method:FaultMethod} after {after:Duration} of load",
      "the node of one replica is pulled with kill after 3 seconds of load")
def pull_replica_node(drill: ScenarioContext, method: FaultMethod | None, after: float) -> None:
    """The node of one replica is pulled with a fault method (as in the node-pull drill). A stream in flight
    on a killed node dies with it, whatever the platform does: promise a loss of 0 only for a drain."""
    drill.serving_drill().pull(after, drill.target.profile.fault.method if method is None else method)


@step("When", "the load jumps to {factor:Count} times its users after {after:Duration} of load",
      "the load jumps to 4 times its users after 3 seconds of load", check=lambda factor, after: _jump(factor))
def load_jumps(drill: ScenarioContext, factor: int, after: float) -> None:
    """A burst: after that much steady load, the extra users (factor - 1 times the steady ones) all arrive at
    once, with the same retry policy."""
    drill.serving_drill().burst(factor, after)


def _jump(factor: int) -> None:
    if factor < 2:
        raise PlaceholderError(str(factor), "a jump to 1 times the users is no jump", "write 2 or more",
                               placeholder="factor")


@step("When", "the burst ends after {seconds:Duration}", "the burst ends after 12 seconds")
def burst_ends(drill: ScenarioContext, seconds: float) -> None:
    """That long after the jump, the extra users leave (each finishes the request it is in); the steady users go
    on. A following 'the load goes on for ...' counts from here."""
    drill.serving_drill().end_burst(seconds)


@step("When", "the load goes on for {seconds:Duration}", "the load goes on for 8 seconds")
def load_goes_on(drill: ScenarioContext, seconds: float) -> None:
    """The load keeps running that long after the drain or pull, then stops: each user finishes the request it
    is in (up to 10 s), and every request's fate is read from the users' own samples."""
    drill.loaded_drill().go_on(seconds)


@step("Then", "p99 time to first token stays within {limit:Duration}",
      "p99 time to first token stays within 1 second")
def p99_ttft(drill: ScenarioContext, limit: float) -> None:
    """Nearest-rank p99 of the answered requests' time to first token, as the users measured it from their
    first attempt (a refused attempt and its back-off count), over the whole run."""
    drill.result.check(Threshold("p99 time to first token", limit, "s"))


@step("Then", "a new replica serves within {limit:Duration} of the queue crossing its threshold",
      "a new replica serves within 10 seconds of the queue crossing its threshold")
def new_replica_serves(drill: ScenarioContext, limit: float) -> None:
    """From the first moment the replicas' mean queue (their own /metrics, read by the harness) is above the
    autoscaler's threshold to the first request served by a replica that was not serving when the load jumped
    (its own served count). The model's load time is inside it: that is what users wait for."""
    drill.serving_drill().measure_new_replica()
    drill.result.check(Threshold("time to a new replica serving", limit, "s"))


@step("Then", "p99 time to first token is back within {sla:Duration} no later than {limit:Duration} after the jump",
      "p99 time to first token is back within 0.5 seconds no later than 12 seconds after the jump")
def sla_holds_again(drill: ScenarioContext, sla: float, limit: float) -> None:
    """From the jump to the start of the last unbroken run of one-second windows (of request starts) in which
    p99 time to first token is within the SLA and every request was answered; never, if the last second of the
    run still misses."""
    drill.serving_drill().measure_sla_back(sla)
    drill.result.check(Threshold("time until the SLA holds again", limit, "s"))


@step("Then", "training resumes from the checkpoint it wrote when preempted within {limit:Duration} of the burst's end",
      "training resumes from the checkpoint it wrote when preempted within 20 seconds of the burst's end")
def training_resumes(drill: ScenarioContext, limit: float) -> None:
    """From the training canary's own log: a rank of the training's next incarnation resumed and stepped beyond
    its resume point that long after the extra users left; it must have resumed from the checkpoint written on
    SIGTERM (any other step FAILs, naming both). Never preempted: never measured."""
    drill.serving_drill().measure_training(timeout=_window(limit))
    drill.result.check(Threshold("training resume after the burst", limit, "s"))


@step("Then", "at most {limit:Number} GPU-seconds of training are lost",
      "at most 5 GPU-seconds of training are lost")
def training_lost(drill: ScenarioContext, limit: float) -> None:
    """The work the training must redo: the highest step its preempted incarnation logged minus the step it
    resumed from, times its median step time and its GPUs (the canary's own log)."""
    if "training GPU-seconds lost" not in drill.result.measurements:
        drill.serving_drill().measure_training()
    drill.result.check(Threshold("training GPU-seconds lost", limit, "GPU-s"))


@step("Then", "p99 time to first token is back within {sla:Duration} no later than {limit:Duration} after the pull",
      "p99 time to first token is back within 0.5 seconds no later than 8 seconds after the pull")
def sla_back_after_pull(drill: ScenarioContext, sla: float, limit: float) -> None:
    """As after a jump, from the instant the node of a replica was pulled: the requests the pulled replica held
    are lost or late whatever the platform does; the promise is how soon users stop noticing."""
    drill.serving_drill().measure_sla_back(sla)
    drill.result.check(Threshold("time until the SLA holds again", limit, "s"))


@step("Then", "at most {limit:Number} % of requests fail", "at most 1 % of requests fail")
def error_rate(drill: ScenarioContext, limit: float) -> None:
    """Requests not answered after the retry policy (refused to the end, or lost), over every request sent."""
    drill.result.check(Threshold("error rate", limit, "%"))


@step("Then", "at most {limit:Whole} requests are lost", "at most 0 requests are lost")
def requests_lost(drill: ScenarioContext, limit: int) -> None:
    """Requests sent and never answered: a stream cut short, a connection that died, no status line after the
    last retry. Each lost request is named (id, error, when it started relative to the act)."""
    drill.result.check(Threshold("requests lost", float(limit), "requests"))


# ------------------------------------------------------------ the control plane under chaos (docs/CONTROL_PLANE.md)
@step("Given", "steady control-plane load from {users:Count} users writing, listing and watching pods",
      "steady control-plane load from 4 users writing, listing and watching pods")
def control_plane_load(drill: ScenarioContext, users: int) -> None:
    """Locust's control-plane users create, update, list and watch pods that no node can take (they stay
    Pending) through the official kubernetes client, each starting its next call when one ends."""
    drill.control_plane_drill().start_load(users)


@step("Given", "{rate:Count} pods are started every second", "2 pods are started every second")
def pods_started(drill: ScenarioContext, rate: int) -> None:
    """Small schedulable pods (`sleep` in the profile's canary image) are created at that rate, each timed from
    its create call to the harness's watch seeing it Running with every container started."""
    drill.control_plane_drill().start_pods(rate)


@step("When", "a node is pulled with {method:FaultMethod} after {after:Duration} of load",
      "a node is pulled with kill after 3 seconds of load")
def pull_any_node(drill: ScenarioContext, method: FaultMethod | None, after: float) -> None:
    """One eligible node (the first by name that takes pods) is pulled with a fault method, as in the node-pull
    drill; on a real cluster the profile's safety checks apply."""
    drill.control_plane_drill().pull(after, drill.target.profile.fault.method if method is None else method)


@step("Then", "mutating API calls have a p99 latency within {limit:Duration}",
      "mutating API calls have a p99 latency within 1 second")
def mutating_p99(drill: ScenarioContext, limit: float) -> None:
    """The Kubernetes SLO, per verb: the worst of the create and update p99 latencies the users measured."""
    drill.result.check(Threshold("mutating API call p99", limit, "s"))


@step("Then", "pod startup has a p99 latency within {limit:Duration}",
      "pod startup has a p99 latency within 5 seconds")
def startup_p99(drill: ScenarioContext, limit: float) -> None:
    """The Kubernetes SLO for schedulable stateless pods: create call to Running with every container started,
    as the harness's watch saw it. Pods bound to the pulled node are shown, not judged; a pod that never
    started counts as never."""
    drill.result.check(Threshold("pod startup p99", limit, "s"))


@step("Then", "every write the API acknowledged is found afterwards",
      "every write the API acknowledged is found afterwards")
def acknowledged_found(drill: ScenarioContext) -> None:
    """Each pod whose create the API acknowledged to a load user is listed afterwards; each missing one is
    named."""
    drill.result.check(Threshold("acknowledged writes lost", 0.0, "writes"))


# ------------------------------------------------------------ governance (docs/GOVERNANCE.md)
def _governance(drill: ScenarioContext) -> GovernanceDrill:
    return drill.governance_drill()


def _chain(chain: str) -> Chain:
    """The control chain a judgement names: admission-and-quota, access, priority or change-control."""
    try:
        return Chain.parse(chain)
    except ValueError:
        raise PlaceholderError(chain, "no such control chain", "write one of " + ", ".join(c.value for c in Chain),
                               placeholder="chain") from None


@step("Given", "a tenant's own credentials and the API server's audit log",
      "a tenant's own credentials and the API server's audit log")
def governance_identities(drill: ScenarioContext) -> None:
    """The drill acts with a tenant's own credentials (an ordinary namespace user) and judges each refusal by its
    record in the API server's audit log: the profile's `governance` section (docs/PROFILE.md), or, on the
    embedded platform, its data directory. Each one missing makes the steps that need it INCONCLUSIVE, naming the
    profile field to set; nothing is skipped silently."""
    _governance(drill).prepare()


@step("When", "the tenant submits a pod asking for more GPUs than its namespace's quota leaves",
      "the tenant submits a pod asking for more GPUs than its namespace's quota leaves")
def quota_pod(drill: ScenarioContext) -> None:
    """Admission and quota: a pod of one GPU more than the tenant namespace's ResourceQuota (`requests.<gpu>`) leaves
    must be refused (403, or 422). A namespace with no such quota has no gate: FAIL."""
    _governance(drill).quota_pod()


@step("When", "the tenant submits a job asking for more GPUs than its namespace's quota leaves",
      "the tenant submits a job asking for more GPUs than its namespace's quota leaves")
def quota_job(drill: ScenarioContext) -> None:
    """Admission and quota: a job (a Volcano Job for the volcano flavor, a batch/v1 Job otherwise) of one worker
    asking one GPU more than the quota leaves. The job itself is accepted; its controller's creates of its pods
    must be refused, and that refusal is the record sought."""
    _governance(drill).quota_job()


@step("Then", "nothing over the quota runs within {limit:Duration}", "nothing over the quota runs within 5 seconds")
def nothing_over_quota(drill: ScenarioContext, limit: float) -> None:
    """For that long no pod of the over-quota job may exist: one that does is the quota letting it through, whether
    or not it runs yet. The pods over the quota that ran are measured and shown."""
    _governance(drill).watch_over_quota(limit)


@step("When", "the tenant reads and writes pods in another tenant's namespace",
      "the tenant reads and writes pods in another tenant's namespace")
def other_namespace(drill: ScenarioContext) -> None:
    """Access: the tenant lists the pods of another tenant's namespace (`governance.other_namespace`), then creates
    one there; both must be refused (403)."""
    _governance(drill).other_namespace()


@step("When", "the tenant binds its own pod to a node, as only the scheduler may",
      "the tenant binds its own pod to a node, as only the scheduler may")
def tenant_binds(drill: ScenarioContext) -> None:
    """Access: the tenant creates a pod that no scheduler takes and POSTs its `pods/binding` to a node itself,
    bypassing the scheduler, the quota and the gang; it must be refused (403)."""
    _governance(drill).binding()


@step("When", "a node's identity writes another node's Lease", "a node's identity writes another node's Lease")
def node_writes_lease(drill: ScenarioContext) -> None:
    """Access: with one node's own credentials (`governance.node_kubeconfig`; the embedded platform's first node
    otherwise) the drill labels another node's Lease in `kube-node-lease`. As upstream's Node authorizer, the API
    must refuse it (403): a node that may renew another's Lease can keep a dead node alive."""
    _governance(drill).node_lease()


@step("When", "the tenant creates a pod with a priority class it may not use",
      "the tenant creates a pod with a priority class it may not use")
def restricted_class(drill: ScenarioContext) -> None:
    """Priority: a pod of `governance.restricted_priority_class` in the tenant's namespace must be refused (403,
    upstream's `insufficient quota to match these scopes`). A class that does not exist proves nothing:
    INCONCLUSIVE."""
    _governance(drill).restricted_class()


@step("When", "the tenant's pod needs the GPUs a pod of a higher priority class holds",
      "the tenant's pod needs the GPUs a pod of a higher priority class holds")
def tenant_needs_higher_gpus(drill: ScenarioContext) -> None:
    """Priority: the drill gives a pod of its own higher PriorityClass every free GPU of one node, then the tenant
    creates a pod of one GPU pinned to that node, at its own lower priority. The tenant's pod must wait."""
    _governance(drill).preemption()


@step("Then", "the pod of the higher class keeps running for {limit:Duration}",
      "the pod of the higher class keeps running for 5 seconds")
def higher_keeps_running(drill: ScenarioContext, limit: float) -> None:
    """For that long the higher class's pod keeps running (the same pod, not deleted or evicted) and the tenant's
    pod stays unbound; the record sought is the scheduler's write of the tenant pod's status (it was held)."""
    _governance(drill).watch_preemption(limit)


@step("When", "the tenant cordons a node", "the tenant cordons a node")
def tenant_cordons(drill: ScenarioContext) -> None:
    """Change control: the tenant marks a node unschedulable (a dry run; the first eligible node by name, as the
    profile's `safety` allows); it must be refused (403)."""
    _governance(drill).cordon()


@step("When", "the tenant evicts another workload's pod", "the tenant evicts another workload's pod")
def tenant_evicts(drill: ScenarioContext) -> None:
    """Change control: the drill starts a pod in the profile's namespace and the tenant POSTs its `pods/eviction`
    (a dry run), the step a drain repeats for every pod; it must be refused (403)."""
    _governance(drill).evict()


@step("When", "the tenant deletes a node", "the tenant deletes a node")
def tenant_deletes_node(drill: ScenarioContext) -> None:
    """Change control: the tenant deletes a node (a dry run); it must be refused (403)."""
    _governance(drill).delete_node()


@step("Then", "the {chain} gate stopped every attempt and the audit log holds a record of each refusal",
      "the access gate stopped every attempt and the audit log holds a record of each refusal", check=_chain)
def chain_held(drill: ScenarioContext, chain: str) -> None:
    """The chain's judgement (`admission-and-quota`, `access`, `priority` or `change-control`): PASS only when every
    attempt of the chain was stopped AND each stop's record is found in the audit log (matched by user, verb,
    objectRef, code and the request's own User-Agent; waiting up to `governance.record_wait_seconds`). Each
    record's SHA-256 goes into the evidence. An attempt that got through, or a refusal without its record, FAILs
    naming the chain and what got through or which record is missing."""
    _governance(drill).judge(_chain(chain))


# ------------------------------------------------------------ rules across the steps of a scenario
PROBE_STEPS = {memory_probe.__name__: "memory", contained_probe.__name__: "contained", reset_probe.__name__: "reset"}


@scenario_rule
def _earlier_steps_decide(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """Values an earlier step decides, checked before anything runs: a pulled worker's rank must be one the
    canary job has; the tenants affected must follow a probe and, on a node this scenario partitions, be what
    the contract promises for that probe in that mode (docs/PARTITIONING.md)."""
    workers: int | None = None
    mode: str | None = None
    probe: str | None = None
    for i, st in enumerate(steps):
        values = st.values
        if st.step == canary_job.__name__:
            workers = values["workers"]
        elif st.step == pull_node.__name__ and workers is not None and values["rank"] >= workers:
            yield i, PlaceholderError(str(values["rank"]), f"the canary job has {workers} worker(s), ranked 0 to "
                                      f"{workers - 1}", f"write a rank from 0 to {workers - 1}", placeholder="rank")
        elif st.step in (partitioned_node.__name__, partitioned_node_one.__name__):
            mode = partition_config(values["layout"], values["model"])["mode"]
        elif st.step == any_partitioned_node.__name__:
            mode = None  # read from the cluster's node when the scenario runs
        elif st.step in PROBE_STEPS:
            probe = PROBE_STEPS[st.step]
        elif st.step == tenants_affected.__name__:
            if probe is None:
                yield i, PlaceholderError(values["words"], "no probe before this step, so nothing to judge",
                                          "put 'When one tenant exceeds its memory share', 'When one tenant's "
                                          "slice takes a contained fault' or 'When its GPU takes a reset-class "
                                          "fault' before it", placeholder="words")
            elif mode is not None and values["words"] != (promised := promise(mode, probe)):
                yield i, PlaceholderError(values["words"], f"after '{PROBES[probe].title}' on a {mode} node the "
                                          f"contract promises {promised!r} (docs/PARTITIONING.md)",
                                          f"write '{promised}'", placeholder="words")


GOVERNANCE_ATTEMPTS = {
    quota_pod.__name__: Chain.ADMISSION_AND_QUOTA, quota_job.__name__: Chain.ADMISSION_AND_QUOTA,
    other_namespace.__name__: Chain.ACCESS, tenant_binds.__name__: Chain.ACCESS,
    node_writes_lease.__name__: Chain.ACCESS,
    restricted_class.__name__: Chain.PRIORITY, tenant_needs_higher_gpus.__name__: Chain.PRIORITY,
    tenant_cordons.__name__: Chain.CHANGE_CONTROL, tenant_evicts.__name__: Chain.CHANGE_CONTROL,
    tenant_deletes_node.__name__: Chain.CHANGE_CONTROL,
}
"""Each governance attempt's sentence and the chain it crosses."""


@scenario_rule
def _governance_in_order(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A chain's judgement follows an attempt of that chain; a watch follows what it watches; what must be
    watched (the over-quota job, the higher class's pod) is watched before its chain is judged."""
    tried: set[Chain] = set()
    job = preempt = False
    for i, st in enumerate(steps):
        value = st.text or st.step
        if st.step in GOVERNANCE_ATTEMPTS:
            tried.add(GOVERNANCE_ATTEMPTS[st.step])
        if st.step == quota_job.__name__:
            job = True
        elif st.step == tenant_needs_higher_gpus.__name__:
            preempt = True
        elif st.step == nothing_over_quota.__name__:
            if not job:
                yield i, PlaceholderError(value, "no job over the quota was submitted, so nothing is watched",
                                          "put 'When the tenant submits a job asking for more GPUs than its "
                                          "namespace's quota leaves' before it")
            job = False
        elif st.step == higher_keeps_running.__name__:
            if not preempt:
                yield i, PlaceholderError(value, "no pod of a higher class holds GPUs the tenant needs",
                                          "put 'When the tenant's pod needs the GPUs a pod of a higher priority class "
                                          "holds' before it")
            preempt = False
        elif st.step == chain_held.__name__:
            chain = _chain(st.values["chain"])
            if chain not in tried:
                yield i, PlaceholderError(st.values["chain"], f"no attempt of the {chain.value} chain comes before "
                                          "this judgement", "put the chain's 'When the tenant ...' sentences before it "
                                          "(docs/GOVERNANCE.md)", placeholder="chain")
            if chain is Chain.ADMISSION_AND_QUOTA and job:
                yield i, PlaceholderError(value, "the over-quota job is never watched", "put 'Then nothing over the "
                                          "quota runs within <duration>' before it")
            if chain is Chain.PRIORITY and preempt:
                yield i, PlaceholderError(value, "the higher class's pod is never watched", "put 'Then the pod of the "
                                          "higher class keeps running for <duration>' before it")


@scenario_rule
def _a_waiting_gang_waits_for_a_running_one(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """'the waiting gang' is the gang submitted after one that runs: both must come before it."""
    running = waiting = False
    for i, st in enumerate(steps):
        if st.step == running_gang.__name__:
            running = True
        elif st.step in (submit_one_gang.__name__, submit_gangs.__name__) and running:
            waiting = True
        elif st.step == waiting_gang_whole.__name__ and not waiting:
            yield i, PlaceholderError(st.text or st.step, "no gang waits in this scenario",
                                      "put 'When a gang of ... runs for ...' and then 'And I submit a gang of ...' "
                                      "before it")


SERVING_THEN = {p99_ttft.__name__, error_rate.__name__, requests_lost.__name__, sla_back_after_pull.__name__}
NEEDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    # step -> (what must come earlier, the problem, the fix) for each requirement
    steady_load.__name__: (("service", "no inference service to load", "put 'Given an inference service of ...' "
                            "before it"),),
    steady_load_with_timeout.__name__: (("service", "no inference service to load", "put 'Given an inference "
                                         "service of ...' before it"),),
    drain_replica_node.__name__: (("serving_load", "no load runs to disturb", "put 'Given steady load from ...' "
                                   "before it"),),
    pull_replica_node.__name__: (("serving_load", "no load runs to disturb", "put 'Given steady load from ...' "
                                  "before it"),),
    load_jumps.__name__: (("serving_load", "no load runs to jump", "put 'Given steady load from ...' before it"),),
    burst_ends.__name__: (("jumped", "no burst to end", "put 'When the load jumps to ... times its users ...' "
                           "before it"),),
    scale_in_window.__name__: (("autoscaled", "no autoscaled service to scale in", "put 'Given an inference "
                                "service of ..., scaling out to ...' before it"),),
    low_priority_training.__name__: (("service", "no inference service to share the cluster with",
                                      "put 'Given an inference service of ...' before it"),),
    pods_started.__name__: (("cp_load", "no control-plane load runs", "put 'Given steady control-plane load "
                             "from ...' before it"),),
    pull_any_node.__name__: (("cp_load", "no control-plane load runs to disturb", "put 'Given steady "
                              "control-plane load from ...' before it"),),
    new_replica_serves.__name__: (("autoscaled", "no autoscaled service, so no new replica is due",
                                   "put 'Given an inference service of ..., scaling out to ...' first"),
                                  ("jumped", "no burst, so no new replica is due",
                                   "put 'When the load jumps to ... times its users ...' first")),
    sla_holds_again.__name__: (("jumped", "no jump to measure from", "put 'When the load jumps to ... times its "
                                "users ...' first"),),
    sla_back_after_pull.__name__: (("pulled", "no pull to measure from", "put 'When the node of one replica is "
                                    "pulled with ...' first"),),
    training_resumes.__name__: (("training", "no training shares the cluster", "put 'Given low-priority canary "
                                 "training of ...' first"),),
    training_lost.__name__: (("training", "no training shares the cluster", "put 'Given low-priority canary "
                              "training of ...' first"),),
    startup_p99.__name__: (("startup", "no pods are started to time", "put 'Given <rate> pods are started every "
                            "second' first"),),
}
JUDGED_AFTER_LOAD = SERVING_THEN | {new_replica_serves.__name__, sla_holds_again.__name__, sla_back_after_pull.__name__,
                                    training_resumes.__name__,
                                    training_lost.__name__, mutating_p99.__name__, startup_p99.__name__,
                                    acknowledged_found.__name__}
SETS = {inference_service.__name__: ("service",), autoscaled_service.__name__: ("service", "autoscaled"),
        steady_load.__name__: ("serving_load",), steady_load_with_timeout.__name__: ("serving_load",),
        pull_replica_node.__name__: ("pulled",), load_jumps.__name__: ("jumped",),
        low_priority_training.__name__: ("training",), control_plane_load.__name__: ("cp_load",),
        pods_started.__name__: ("startup",), load_goes_on.__name__: ("stopped",)}


@scenario_rule
def _load_steps_in_order(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """The serving and control-plane sentences build on each other: a load needs its service, a burst its load,
    a judgement the load to have stopped ('the load goes on for ...'), a new replica an autoscaled service."""
    seen: set[str] = set()
    for i, st in enumerate(steps):
        value = st.text or st.step
        for flag, problem, fix in NEEDS.get(st.step, ()):
            if flag not in seen:
                yield i, PlaceholderError(value, problem, fix)
        if st.step in JUDGED_AFTER_LOAD and "stopped" not in seen:
            yield i, PlaceholderError(value, "the load is still running here, so there is nothing to judge yet",
                                      "put 'When the load goes on for <duration>' before it")
        if st.step in SERVING_THEN and "service" not in seen:
            yield i, PlaceholderError(value, "no inference service in this scenario",
                                      "put 'Given an inference service of ...' first")
        if st.step == load_goes_on.__name__ and not seen & {"serving_load", "cp_load"}:
            yield i, PlaceholderError(value, "no load runs in this scenario", "put 'Given steady load from ...' or "
                                      "'Given steady control-plane load from ...' first")
        seen.update(SETS.get(st.step, ()))


# ------------------------------------------------------------ baseline first (docs/CONTRACTS.md)
def _baseline_path_check(path: str) -> None:
    if not path.strip().endswith(".json"):
        raise PlaceholderError(path, "not a baseline statement file", "name the .json file `firedrill baseline` "
                               "wrote (a DSSE envelope, e.g. baselines/before.dsse.json)", placeholder="path")


@step("Given", 'the signed baseline "{path}"', 'the signed baseline "baselines/before.dsse.json"',
      check=_baseline_path_check)
def signed_baseline(drill: ScenarioContext, path: str) -> None:
    """A baseline statement written by `firedrill baseline` (a path relative to the features directory, or
    absolute). It is verified before anything is read (with the public key it carries: integrity); one that
    cannot be read, does not verify or is not a baseline makes the scenario INCONCLUSIVE, naming why."""
    _baseline_path_check(path)
    drill.baseline_drill().load(path)


@step("When", "the cluster is observed with the baseline's method", "the cluster is observed with the baseline's method")
def observed_with_baseline_method(drill: ScenarioContext) -> None:
    """Measure the target exactly as the baseline was measured: the same source (the target profile must give the
    same kind), the baseline's workload mix run again (or the cluster's own workload), the same window and
    slices; then compare. A different method makes the scenario INCONCLUSIVE, naming the field; the measurement
    goes into the evidence, so `firedrill compare BASELINE reports/<run-id>` can repeat the comparison."""
    drill.baseline_drill().observe()


def _layer_check(layer: str, points: float) -> None:
    if layer.strip().lower() not in ("allocated", "active", "effective"):
        raise PlaceholderError(layer, "unknown utilization layer", "write allocated, active or effective "
                               "(docs/LEAK_REPORT.md)", placeholder="layer")


@step("Then", "{layer} utilization improves by at least {points:Number} points over the signed baseline",
      "effective utilization improves by at least 10 points over the signed baseline", check=_layer_check)
def layer_improves(drill: ScenarioContext, layer: str, points: float) -> None:
    """The layer's share of healthy capacity rose by at least that many percentage points over the baseline,
    after its uncertainty is taken off: PASS only if the improvement minus its 95 % uncertainty is at least the
    number (docs/CONTRACTS.md)."""
    _layer_check(layer, points)
    drill.baseline_drill().judge(f"{layer} utilization improves by at least {points:g} points")


@step("Then", "the {hole:Hole} hole shrinks by at least {hours:Number} GPU-hours over the signed baseline",
      "the data pipeline hole shrinks by at least 0.5 GPU-hours over the signed baseline")
def hole_shrinks(drill: ScenarioContext, hole: Hole, hours: float) -> None:
    """The hole's GPU-hours over the window fell by at least that many, after its uncertainty is taken off: PASS
    only if the shrinkage minus its 95 % uncertainty is at least the number; a hole the source cannot measure is
    INCONCLUSIVE."""
    drill.baseline_drill().judge(f"the {hole.words} hole shrinks by at least {hours:g} GPU-hours")


BASELINE_THEN = {layer_improves.__name__, hole_shrinks.__name__}


@scenario_rule
def _baseline_steps_in_order(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A re-measurement takes its method from a baseline named before it; a clause judges a re-measurement."""
    loaded = measured = False
    for i, st in enumerate(steps):
        if st.step == signed_baseline.__name__:
            loaded = True
        elif st.step == observed_with_baseline_method.__name__:
            if not loaded:
                yield i, PlaceholderError(st.text or st.step, "no baseline to take the method from",
                                          "put 'Given the signed baseline \"FILE\"' before it")
            measured = True
        elif st.step in BASELINE_THEN and not measured:
            yield i, PlaceholderError(st.text or st.step, "nothing was measured to compare with the baseline",
                                      "put 'When the cluster is observed with the baseline's method' before it")
