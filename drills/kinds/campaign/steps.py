"""The campaign's sentences (docs/STEPS.md, docs/CAMPAIGN.md). The canary job and its checkpoint are node pull's
sentences: they act on this drill in a scenario with a campaign."""

from __future__ import annotations

import re

from drills.errors import PlaceholderError
from drills.kinds.campaign.drill import CampaignDrill
from drills.kinds.campaign.slurm import SlurmCampaign  # noqa: F401 - its Slurm side, registered on import
from drills.kinds.campaign.ray import RayCampaign  # noqa: F401 - its Ray side, registered on import
from drills.records.verdict import Comparison, Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import placeholder, step
from drills.target.faultmix import FaultMix, MixError, load_mix


def parse_share(text: str) -> float:
    """'90 %', '97.5%' -> 90.0, 97.5: a percentage above 0 and at most 100."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", text)
    if not m or not 0 < float(m.group(1)) <= 100:
        raise PlaceholderError(text, "not a percentage above 0 % and at most 100 %", "write e.g. '90 %'")
    return float(m.group(1))


parse_share.pattern = r"\S+(?:\s*%)?"  # type: ignore[attr-defined]


def parse_mix(text: str) -> FaultMix:
    """A shipped mix by name (``llama3-405b``, ``node-loss``: ``mixes/``) or the path of your own mix file."""
    try:
        return load_mix(text.strip())
    except MixError as exc:
        raise PlaceholderError(text, str(exc), "name a mix in mixes/ or give the path of a .yaml mix file "
                                               "(docs/CAMPAIGN.md)") from None


parse_mix.pattern = r"[\w./-]+"  # type: ignore[attr-defined]

placeholder("Share", parse_share, doc=(
    "- `<share>`: a percentage above 0 % and at most 100 % (`90 %`);",))
placeholder("Mix", parse_mix, doc=(
    "- `<mix>`: a fault mix: the name of one in `mixes/` (`llama3-405b`, `node-loss`) or the path of your own "
    "(docs/CAMPAIGN.md);",))


def _campaign(drill: ScenarioContext) -> CampaignDrill:
    return drill.drill(CampaignDrill)


@step("Given", "the campaign's seed is {seed:Whole}", "the campaign's seed is 42")
def campaign_seed(drill: ScenarioContext, seed: int) -> None:
    """The seed of the fault schedule and of which rank each fault hits: the same seed replays the same campaign.
    Without this sentence a seed is drawn, printed and recorded in the evidence."""
    _campaign(drill).seed = seed


@step("When", "faults from the {mix:Mix} mix arrive every {interval:Duration} on average for {duration:Duration}",
      "faults from the llama3-405b mix arrive every 20 seconds on average for 3 minutes")
def faults_arrive(drill: ScenarioContext, mix: FaultMix, interval: float, duration: float) -> None:
    """Faults arrive as a Poisson process of that mean gap, each of a kind the mix draws by weight, on a rank the
    seed draws; one at a time (an arrival while the job recovers is skipped and counted); each is undone once the
    job has recovered. A fault not recovered within 60 s needs a person and ends the campaign."""
    _campaign(drill).run(mix, interval, duration)


@step("Then", "effective training time is at least {share:Share}",
      "effective training time is at least 70 %")
def effective_training_time(drill: ScenarioContext, share: float) -> None:
    """The wall time of the steps that count (a step recomputed after a restart counts once, a straggler's
    excess does not) over the campaign's wall time, from the canary's own log; the badput by cause is in the
    evidence."""
    drill.result.check(Threshold("effective training time", share, "%", Comparison.AT_LEAST))


@step("Then", "every fault is recovered automatically within {limit:Duration}",
      "every fault is recovered automatically within 30 seconds")
def every_fault_recovered(drill: ScenarioContext, limit: float) -> None:
    """Each injected fault's recovery (its injection to a new rank's first step beyond its resume point) within
    that time."""
    if _campaign(drill).judge_recoveries(limit):  # no fault injected: INCONCLUSIVE, nothing to hold to the limit
        drill.result.check(Threshold("slowest recovery", limit, "s"))


@step("Then", "at most {steps:Whole} steps are lost per fault", "at most 10 steps are lost per fault")
def lost_per_fault(drill: ScenarioContext, steps: int) -> None:
    """For each fault: the highest step logged before it less the step the job resumed from."""
    if _campaign(drill).judge_lost_steps(steps):  # no fault injected: INCONCLUSIVE, no steps to count
        drill.result.check(Threshold("most steps lost by one fault", float(steps), "steps"))
