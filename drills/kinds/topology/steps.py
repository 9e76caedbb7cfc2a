"""The topology drill's sentences (docs/STEPS.md, docs/TOPOLOGY.md)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.topology.domains import LEVEL_PATTERN, Level, parse_level
from drills.kinds.topology.drill import WAITING_HELD, TopologyDrill
from drills.kinds.topology.restart import TopologyRestartDrill
from drills.kube.flavors import valid_label_key
from drills.records.verdict import Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import observe_window
from drills.scenario.vocabulary import Checked, Requires, placeholder, scenario_rule, step


def parse_level_words(text: str) -> Level:
    """'rack', 'racks', 'NVLink domain', 'block', 'zone' -> the level of topology domain."""
    try:
        return parse_level(text)
    except ValueError:
        raise PlaceholderError(text, "unknown topology level",
                               "write one of " + ", ".join(f"'{level.value}'" for level in Level)) from None


parse_level_words.pattern = LEVEL_PATTERN  # type: ignore[attr-defined]
placeholder("Level", parse_level_words, doc=(
    "- `<level>`: " + ", ".join(f"`{level.value}`" for level in Level) + " (or the plural): a kind of topology",
    "  domain, the nodes that share one value of a node label: by default "
    + ", ".join(f"`{level.default_label}` for a {level.value}" for level in Level) + ",",
    "  or the label the scenario names (`Given a rack is the set of nodes that share the label ...`);"))

GANG, OTHER_ENDS, FREED = "topology-gang", "topology-other-job-ends", "topology-freed"
BOUND_JOB = "topology-bound-job"
NEEDS_GANG = Requires((GANG,), "no gang that must stay inside one domain was submitted before this step",
                      "put 'When I submit a gang of ... that must stay inside one rack' before it")


def _drill(ctx: ScenarioContext) -> TopologyDrill:
    return ctx.drill(TopologyDrill)


def _label_key(level: Level, label: str) -> None:
    if not valid_label_key(label):
        raise PlaceholderError(label, "not a node label key", "write a label key such as "
                               f"{level.default_label}", placeholder="label")


@step("Given", "a {level:Level} is the set of nodes that share the label {label}",
      "a rack is the set of nodes that share the label cloud.provider.com/topology-rack", check=_label_key)
def domain_label(drill: ScenarioContext, level: Level, label: str) -> None:
    """What the scenario's domains are: the nodes that share one value of this node label (without this sentence,
    the level's common label: see `<level>`). Name your cluster's own label here: GKE's, AWS's and your
    provider's rack labels differ."""
    _label_key(level, label)
    _drill(drill).use(level, label)


@step("Given", "the cluster has at least {count:Count} {level:Level} with {gpus:Count} free GPUs each",
      "the cluster has at least 2 racks with 16 free GPUs each")
def enough_domains(drill: ScenarioContext, count: int, level: Level, gpus: int) -> None:
    """Steady state before: that many domains of the label with that many free GPUs each, on nodes the drill's
    pods may use (schedulable, Ready, no taint that repels them); INCONCLUSIVE otherwise, naming each domain's free
    GPUs and the schedulable nodes without the label."""
    _drill(drill).steady_state_before(count, level, gpus)


@step("Given", "another job holds {gpus:Gpus} on each node of one {level:Level}",
      "another job holds 4 GPUs on each node of one rack")
def other_job_one(drill: ScenarioContext, gpus: int, level: Level) -> None:
    """Another job's pods (canaries that hold their GPUs) take that many GPUs on each node of one domain (the first
    by name where every node has them free), until the rollback: a scheduler that ignores a gang's topology then
    has a reason to cross domains (best fit fills those nodes first). Returns once they all run."""
    _drill(drill).hold(gpus, level, every=False)


@step("Given", "another job holds {gpus:Gpus} on each node of every {level:Level} for {duration:Duration}",
      "another job holds 4 GPUs on each node of every rack for 4 seconds", sets=(OTHER_ENDS,))
def other_job_every(drill: ScenarioContext, gpus: int, level: Level, duration: float) -> None:
    """The same on each node of every domain, each pod ending on its own after that long: then a domain frees
    up. It occupies GPUs on every node that carries the label: run it on a test cluster or a partition of one."""
    _drill(drill).hold(gpus, level, every=True, seconds=duration)


@step("When", "I submit a gang of {workers:Workers} with {gpus:Gpus} each that must stay inside one "
              "{level:Level}",
      "I submit a gang of 4 workers with 4 GPUs each that must stay inside one rack", sets=(GANG,))
def submit_gang(drill: ScenarioContext, workers: int, gpus: int, level: Level) -> None:
    """One gang of training canary ranks (all placed together) that asks to stay inside one domain of the label:
    Kueue's `kueue.x-k8s.io/podset-required-topology` on every pod (read by the reference platform in every flavor,
    by Kueue's topology-aware scheduling in the kueue flavor), the PodGroup's `schedulingConstraints.topology` in
    the native flavor (docs/TOPOLOGY.md)."""
    _drill(drill).submit(workers, gpus, level)


@step("Then", "every worker runs inside one {level:Level} within {limit:Duration}",
      "every worker runs inside one rack within 30 seconds", requires=(NEEDS_GANG,))
def runs_inside_one(drill: ScenarioContext, level: Level, limit: float) -> None:
    """Every worker Running at once, all on nodes of one domain, measured from submission: where each pod runs is
    the harness's own watch, each node's domain its own reading of the node's label. A gang spread over domains
    FAILs at once, naming the domains and which pod went where; INCONCLUSIVE when no domain had room for it."""
    _drill(drill).wait_inside_one(observe_window(limit))
    drill.result.check(Threshold(TopologyDrill.inside_one_name(level), limit, "s"))


@step("Then", "the gang places no pod and holds no GPU for {duration:Duration}",
      "the gang places no pod and holds no GPU for 3 seconds", requires=(NEEDS_GANG,))
def waits_whole(drill: ScenarioContext, duration: float) -> None:
    """A gang that fits the cluster but no single domain waits whole rather than crossing domains: for that long
    after submission no pod of it is bound. A pod bound FAILs at once, naming the domains, the pods, their nodes
    and the GPUs held; INCONCLUSIVE when a domain had room for it (it need not wait) or the cluster had not."""
    _drill(drill).observe_waiting(duration, duration)
    drill.result.check(Threshold(WAITING_HELD, 0, "GPUs"))


@step("Then", "the gang places no pod and holds no GPU until a {level:Level} frees up",
      "the gang places no pod and holds no GPU until a rack frees up",
      requires=(NEEDS_GANG, Requires((OTHER_ENDS,), "nothing in this scenario frees a domain up",
                                     "put 'Given another job holds ... on each node of every rack for ...' before "
                                     "it")), sets=(FREED,))
def waits_until_freed(drill: ScenarioContext, level: Level) -> None:
    """The same until a domain frees up for this gang: the first instant some domain has room for all its workers,
    counted node by node from the free GPUs the harness read at submission plus those of each pod of the other job
    its watch saw end since (for a gang smaller than a rack, one holder's end can be enough; for one as large as a
    rack, every holder in it must end). A pod bound before then FAILs, naming the domains, pods and bind instants;
    INCONCLUSIVE when no domain gains room for the gang before the other job's time is up."""
    seconds = _drill(drill).other_seconds or 0.0
    _drill(drill).observe_waiting(None, observe_window(seconds))
    drill.result.check(Threshold(WAITING_HELD, 0, "GPUs"))


@step("Then", "every worker runs inside one {level:Level} within {limit:Duration} of a {freed:Level} freeing up",
      "every worker runs inside one rack within 30 seconds of a rack freeing up",
      requires=(Requires((FREED,), "no earlier step waited for a domain to free up",
                         "put 'Then the gang places no pod and holds no GPU until a rack frees up' before it"),))
def runs_inside_freed(drill: ScenarioContext, level: Level, limit: float, freed: Level) -> None:
    """Every worker Running inside one domain, measured from the instant a domain had room for the whole gang (the
    previous sentence's instant): a gang that waits must also run once it can."""
    _drill(drill).wait_inside_one(observe_window(limit), since_freed=True)
    drill.result.check(Threshold(TopologyDrill.inside_one_name(level, since_freed=True), limit, "s"))


@step("Given", "a canary training job of {workers:Workers} with {gpus:Gpus} each that must stay inside one "
               "{level:Level}, checkpointing every {every:Steps}",
      "a canary training job of 2 workers with 8 GPUs each that must stay inside one rack, checkpointing every 5 "
      "steps", sets=(BOUND_JOB,))
def canary_job_inside_one(drill: ScenarioContext, workers: int, gpus: int, level: Level, every: int) -> None:
    """The node pull's canary training job (its job controller restarts it when a node is lost under it) asking to
    stay inside one domain of the label, as the gang does (`kueue.x-k8s.io/podset-required-topology` on its pod
    template); returns once every rank trains. A first placement spread over domains FAILs, naming them. Pull a
    node under it with `When I pull the node of worker ...`."""
    label = _drill(drill).use(level)
    drill.drill(TopologyRestartDrill).start_inside_one(workers, gpus, every, level, label)


@step("Then", "the job runs again inside one {level:Level} within {limit:Duration} of the pull",
      "the job runs again inside one rack within 30 seconds of the pull",
      requires=(Requires((BOUND_JOB,), "no canary job that must stay inside one domain was started before this step",
                         "put 'Given a canary training job of ... that must stay inside one rack, checkpointing "
                         "every ...' before it"),))
def runs_again_inside_one(drill: ScenarioContext, level: Level, limit: float) -> None:
    """Topology through a fault: after the pull, every rank of the restarted job Running on a healthy node, all
    on nodes of one domain, measured from the fault (where each pod runs is the harness's own watch; pods made
    after the fault are told apart by UID). A pod of it bound in a second domain FAILs at once, naming the domains
    and which pod went where; a job that never runs whole again ends the scenario, naming how many pods were placed.
    A scheduler that honours the request only at a gang's first placement FAILs here."""
    drill.drill(TopologyRestartDrill).judge_inside_one_again(limit)
    drill.result.check(Threshold(TopologyRestartDrill.again_name(level), limit, "s"))


@scenario_rule
def _one_level_a_scenario(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A scenario's sentences speak of one kind of domain: 'rack' throughout, or 'NVLink domain' throughout."""
    first: Level | None = None
    for i, st in enumerate(steps):
        for key in ("level", "freed"):
            level = st.values.get(key)
            if not isinstance(level, Level):
                continue
            if first is None:
                first = level
            elif level is not first:
                yield i, PlaceholderError(level.value, f"this scenario's domains are {first.value}s",
                                          f"write '{first.value}' here too, or split the scenario",
                                          placeholder="level")
