"""A campaign none of whose arrivals could be injected (every fault of its mix without a way to inject it here, or
arriving while the job recovered) proves nothing about recoveries: INCONCLUSIVE, saying so, never a FAIL for
thresholds nobody could measure."""

from __future__ import annotations

from typing import Any

from drills.kinds.campaign.drill import CampaignDrill
from drills.kinds.campaign.steps import every_fault_recovered, lost_per_fault
from drills.records.verdict import DrillResult, Verdict


class Context:
    """The scenario context as the campaign's sentences use it: its result and its campaign drill."""

    def __init__(self, drill: CampaignDrill) -> None:
        self.result = drill.result
        self._drill = drill

    def drill_for(self, base: Any, default: Any) -> CampaignDrill:
        return self._drill

    def drill(self, kind: Any) -> CampaignDrill:
        return self._drill


def test_a_campaign_that_injected_nothing_is_inconclusive_not_failed() -> None:
    result = DrillResult("campaign")
    ctx = Context(CampaignDrill(None, result, "fd000000"))  # type: ignore[arg-type] - no target is touched
    every_fault_recovered(ctx, 30.0)  # type: ignore[arg-type]
    lost_per_fault(ctx, 10)  # type: ignore[arg-type]
    assert result.verdict is Verdict.INCONCLUSIVE, (result.verdict, result.findings, result.judgements)
    assert any("no fault of the campaign was injected (every arrival was skipped)" in f for f in result.findings)
    assert not result.judgements  # no threshold was held against a value nobody measured
