"""The serving drill's sentences (docs/STEPS.md, docs/SERVING.md).  'When the load goes on for ...' is
shared with the control-plane drill: :mod:`drills.bdd.steps`."""

from __future__ import annotations

from drills.errors import PlaceholderError
from drills.kinds.serving import Autoscale, ServingDrill
from drills.records.verdict import Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import observe_window
from drills.scenario.vocabulary import Requires, step, window_outlasts
from drills.target.profile import FaultMethod

@step("Given", "an inference service of {replicas:Replicas} with {gpus:Whole} GPUs each behind a load balancer",
      "an inference service of 3 replicas with 8 GPUs each behind a load balancer",
      sets=('service',))
def inference_service(drill: ScenarioContext, replicas: int, gpus: int) -> None:
    """A Deployment of inference canaries (`firedrill-inference serve`: streams tokens, reports vLLM's metrics,
    drains on SIGTERM), each asking for that many GPUs (so replicas of a whole node's GPUs land on different
    nodes), behind a Service of type LoadBalancer; waits until every replica is Ready and the Service has an
    address. None within 60 s: INCONCLUSIVE."""
    drill.drill(ServingDrill).deploy(replicas, gpus)


@step("Given", "an inference service of {replicas:Replicas} with {gpus:Whole} GPUs each behind a load balancer, "
               "scaling out to {most:Count} replicas when more than {waiting:Count} requests wait per replica, each new "
               "replica loading its model for {warmup:Duration}",
      "an inference service of 2 replicas with 8 GPUs each behind a load balancer, scaling out to 4 replicas when more "
      "than 2 requests wait per replica, each new replica loading its model for 2 seconds",
      check=lambda replicas, gpus, most, waiting, warmup: _autoscale_range(replicas, most),
      sets=('service', 'autoscaled'))
def autoscaled_service(drill: ScenarioContext, replicas: int, gpus: int, most: int, waiting: int,
                       warmup: float) -> None:
    """The inference service as above, with a HorizontalPodAutoscaler on the canary's own queue
    (`vllm:num_requests_waiting`, that many per replica on average) between the replicas given and the most;
    every replica answers 503 on /health (so is not Ready) until its model has loaded. Its model batches 4
    requests and takes 0.85 s for 16 tokens, so a burst queues (docs/SERVING.md)."""
    drill.drill(ServingDrill).deploy(replicas, gpus, Autoscale(most, waiting, warmup))


def _autoscale_range(replicas: int, most: int) -> None:
    if most <= replicas:
        raise PlaceholderError(str(most), f"the service already has {replicas} replicas, so it cannot scale out to "
                               f"{most}", f"write more than {replicas}", placeholder="most")


@step("Given", "the service scales in {window:Duration} after its queue empties",
      "the service scales in 5 seconds after its queue empties",
      requires=(Requires(("autoscaled",), "no autoscaled service to scale in",
                         "put 'Given an inference service of ..., scaling out to ...' before it"),))
def scale_in_window(drill: ScenarioContext, window: float) -> None:
    """The autoscaler's scale-down stabilization window (upstream's default: 300 s): how long the queue must
    stay low before replicas are removed."""
    drill.drill(ServingDrill).scale_in_after(window)


@step("Given", "low-priority canary training of {workers:Workers} with {gpus:Gpus} each fills the idle GPUs, "
               "checkpointing every {every:Steps} and when preempted",
      "low-priority canary training of 2 workers with 8 GPUs each fills the idle GPUs, checkpointing every 20 steps "
      "and when preempted",
      requires=(Requires(("service",), "no inference service to share the cluster with",
                         "put 'Given an inference service of ...' before it"),),
      sets=("training",))
def low_priority_training(drill: ScenarioContext, workers: int, gpus: int, every: int) -> None:
    """The training canary as a job at a PriorityClass below the default (the drill creates it, value -100,
    never preempting), so inference may preempt it; rank 0 checkpoints every that many steps and, when told to
    stop, at its last completed step (`--checkpoint-on-sigterm`). Waits until every rank trains."""
    drill.drill(ServingDrill).share_with_training(workers, gpus, every)


@step("Given", "steady load from {users:Count} users who retry a refused request up to {retries:Whole} times",
      "steady load from 12 users who retry a refused request up to 2 times",
      requires=(Requires(("service",), "no inference service to load",
                         "put 'Given an inference service of ...' before it"),),
      sets=("serving_load",))
def steady_load(drill: ScenarioContext, users: int, retries: int) -> None:
    """Locust's inference users stream completions through the Service's address, each starting its next
    request when one ends. The users' retry policy (docs/LOAD.md): a request refused before the server took it
    on (connection failed or closed before a status line, 429, 503) is sent again up to that many times; a
    stream cut short is never retried."""
    drill.drill(ServingDrill).start_load(users, retries)


@step("Given", "steady load from {users:Count} users who retry a refused request up to {retries:Whole} times, "
               "giving up on a silent server after {timeout:Duration}",
      "steady load from 12 users who retry a refused request up to 2 times, giving up on a silent server after "
      "1 second",
      requires=(Requires(("service",), "no inference service to load",
                         "put 'Given an inference service of ...' before it"),),
      sets=("serving_load",))
def steady_load_with_timeout(drill: ScenarioContext, users: int, retries: int, timeout: float) -> None:
    """As above, and a user that hears nothing from the server for that long (no status line, or no token)
    gives the attempt up: before a status line that is a refusal, retried under the same policy; mid-stream
    it is a lost request."""
    drill.drill(ServingDrill).start_load(users, retries, timeout)


@step("When", "the node of one replica is drained after {after:Duration} of load",
      "the node of one replica is drained after 3 seconds of load",
      requires=(Requires(('serving_load',), 'no load runs to disturb', "put 'Given steady load from ...' before it"),))
def drain_replica_node(drill: ScenarioContext, after: float) -> None:
    """Planned maintenance: the node of one replica is cordoned and the drill's pods on it are evicted through
    the Eviction API, as `kubectl drain` does (the node is uncordoned on rollback). The platform should stop
    routing to the replica and let it finish what it took on within its grace period."""
    drill.drill(ServingDrill).drain(after)


@step("When", "the node of one replica is pulled with {method:FaultMethod} after {after:Duration} of load",
      "the node of one replica is pulled with kill after 3 seconds of load",
      requires=(Requires(("serving_load",), "no load runs to disturb", "put 'Given steady load from ...' before it"),),
      sets=("pulled", FAULTED))
def pull_replica_node(drill: ScenarioContext, method: FaultMethod | None, after: float) -> None:
    """The node of one replica is pulled with a fault method (as in the node-pull drill). A stream in flight
    on a killed node dies with it, whatever the platform does: promise a loss of 0 only for a drain."""
    drill.drill(ServingDrill).pull(after, drill.fault_method(method))


@step("When", "the load jumps to {factor:Count} times its users after {after:Duration} of load",
      "the load jumps to 4 times its users after 3 seconds of load", check=lambda factor, after: _jump(factor),
      requires=(Requires(("serving_load",), "no load runs to jump", "put 'Given steady load from ...' before it"),),
      sets=("jumped",))
def load_jumps(drill: ScenarioContext, factor: int, after: float) -> None:
    """A burst: after that much steady load, the extra users (factor - 1 times the steady ones) all arrive at
    once, with the same retry policy."""
    drill.drill(ServingDrill).burst(factor, after)


def _jump(factor: int) -> None:
    if factor < 2:
        raise PlaceholderError(str(factor), "a jump to 1 times the users is no jump", "write 2 or more",
                               placeholder="factor")


@step("When", "the burst ends after {seconds:Duration}", "the burst ends after 12 seconds",
      requires=(Requires(("jumped",), "no burst to end",
                         "put 'When the load jumps to ... times its users ...' before it"),))
def burst_ends(drill: ScenarioContext, seconds: float) -> None:
    """That long after the jump, the extra users leave (each finishes the request it is in); the steady users go
    on. A following 'the load goes on for ...' counts from here."""
    drill.drill(ServingDrill).end_burst(seconds)


@step("Then", "p99 time to first token stays within {limit:Duration}",
      "p99 time to first token stays within 1 second",
      requires=(Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),
                Requires(("service",), "no inference service in this scenario",
                         "put 'Given an inference service of ...' first"),))
def p99_ttft(drill: ScenarioContext, limit: float) -> None:
    """Nearest-rank p99 of the answered requests' time to first token, as the users measured it from their
    first attempt (a refused attempt and its back-off count), over the whole run."""
    drill.result.check(Threshold("p99 time to first token", limit, "s"))


@step("Then", "a new replica serves within {limit:Duration} of the queue crossing its threshold",
      "a new replica serves within 10 seconds of the queue crossing its threshold",
      requires=(Requires(("autoscaled",), "no autoscaled service, so no new replica is due",
                         "put 'Given an inference service of ..., scaling out to ...' first"),
                Requires(("jumped",), "no burst, so no new replica is due",
                         "put 'When the load jumps to ... times its users ...' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def new_replica_serves(drill: ScenarioContext, limit: float) -> None:
    """From the first moment the replicas' mean queue (their own /metrics, read by the harness) is above the
    autoscaler's threshold to the first request served by a replica that was not serving when the load jumped
    (its own served count). The model's load time is inside it: that is what users wait for (a window no longer
    than that load time is refused before anything runs)."""
    drill.drill(ServingDrill).measure_new_replica()
    drill.result.check(Threshold("time to a new replica serving", limit, "s"))


@step("Then", "p99 time to first token is back within {sla:Duration} no later than {limit:Duration} after the jump",
      "p99 time to first token is back within 0.5 seconds no later than 12 seconds after the jump",
      requires=(Requires(("jumped",), "no jump to measure from",
                         "put 'When the load jumps to ... times its users ...' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def sla_holds_again(drill: ScenarioContext, sla: float, limit: float) -> None:
    """From the jump to the start of the last unbroken run of one-second windows (of request starts) in which
    p99 time to first token is within the SLA and every request was answered; never, if the last second of the
    run still misses."""
    drill.drill(ServingDrill).measure_sla_back(sla)
    drill.result.check(Threshold("time until the SLA holds again", limit, "s"))


@step("Then", "training resumes from the checkpoint it wrote when preempted within {limit:Duration} of the burst's end",
      "training resumes from the checkpoint it wrote when preempted within 20 seconds of the burst's end",
      requires=(Requires(("training",), "no training shares the cluster",
                         "put 'Given low-priority canary training of ...' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def training_resumes(drill: ScenarioContext, limit: float) -> None:
    """From the training canary's own log: a rank of the training's next incarnation resumed and stepped beyond
    its resume point that long after the extra users left; it must have resumed from the step rank 0 stopped at on
    SIGTERM, which that rank checkpointed then unless a periodic checkpoint of it was already written (any other
    step FAILs, naming both). Never preempted: never measured."""
    drill.drill(ServingDrill).measure_training(timeout=observe_window(limit))
    drill.result.check(Threshold("training resume after the burst", limit, "s"))


@step("Then", "at most {limit:Number} GPU-seconds of training are lost",
      "at most 5 GPU-seconds of training are lost",
      requires=(Requires(("training",), "no training shares the cluster",
                         "put 'Given low-priority canary training of ...' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def training_lost(drill: ScenarioContext, limit: float) -> None:
    """The work the training must redo: the highest step its preempted incarnation logged minus the step it
    resumed from, times its median step time and its GPUs (the canary's own log)."""
    if "training GPU-seconds lost" not in drill.result.measurements:
        drill.drill(ServingDrill).measure_training()
    drill.result.check(Threshold("training GPU-seconds lost", limit, "GPU-s"))


@step("Then", "p99 time to first token is back within {sla:Duration} no later than {limit:Duration} after the pull",
      "p99 time to first token is back within 0.5 seconds no later than 8 seconds after the pull",
      requires=(Requires(("pulled",), "no pull to measure from",
                         "put 'When the node of one replica is pulled with ...' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),
                Requires(("service",), "no inference service in this scenario",
                         "put 'Given an inference service of ...' first"),))
def sla_back_after_pull(drill: ScenarioContext, sla: float, limit: float) -> None:
    """As after a jump, from the instant the node of a replica was pulled: the requests the pulled replica held
    are lost or late whatever the platform does; the promise is how soon users stop noticing."""
    drill.drill(ServingDrill).measure_sla_back(sla)
    drill.result.check(Threshold("time until the SLA holds again", limit, "s"))


@step("Then", "at most {limit:Number} % of requests fail", "at most 1 % of requests fail",
      requires=(Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),
                Requires(("service",), "no inference service in this scenario",
                         "put 'Given an inference service of ...' first"),))
def error_rate(drill: ScenarioContext, limit: float) -> None:
    """Requests not answered after the retry policy (refused to the end, or lost), over every request sent."""
    drill.result.check(Threshold("error rate", limit, "%"))


@step("Then", "at most {limit:Whole} requests are lost", "at most 0 requests are lost",
      requires=(Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),
                Requires(("service",), "no inference service in this scenario",
                         "put 'Given an inference service of ...' first"),))
def requests_lost(drill: ScenarioContext, limit: int) -> None:
    """Requests sent and never answered: a stream cut short, a connection that died, no status line after the
    last retry. Each lost request is named (id, error, when it started relative to the act)."""
    drill.result.check(Threshold("requests lost", float(limit), "requests"))


# A new replica serves at the earliest its model's load time after the queue crossed the threshold (the autoscaler
# creates it then).
window_outlasts(autoscaled_service.__name__, "warmup", new_replica_serves.__name__,
                "a new replica loads its model for {earliest} s before it can serve, and the window starts when the "
                "queue crosses the threshold", spare=10)
