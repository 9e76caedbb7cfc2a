"""A whole GPU's way back (refplatform.gpu.lifecycle): failed -> burn-in -> in service; a failed burn-in or a flap
holds it until a person clears it; the two defects that bend the rule.  Every instant is given, none read."""

from __future__ import annotations

import json

import pytest

from refplatform.gpu.lifecycle import (
    BURN_INS_KEPT,
    GpuEvent,
    GpuState,
    Lifecycle,
    LifecycleRules,
    parse_diag_entries,
)

RULES = LifecycleRules(burn_in_seconds=2.0, flap_window_seconds=60.0)
T0 = 1_000_000.0


def states(lc: Lifecycle, gpus: int = 4) -> dict[int, str]:
    return {g: lc.state(g).value for g in range(gpus) if lc.state(g) is not GpuState.IN_SERVICE}


def failed_then_cleared(rules: LifecycleRules = RULES, at: float = T0) -> Lifecycle:
    lc = Lifecycle().step(at, rules, {0: 79}).lifecycle
    return lc.step(at + 1, rules, {}).lifecycle


def returned(rules: LifecycleRules = RULES) -> Lifecycle:
    """GPU 0 failed at T0, its Xid cleared at T0+1, its burn-in passed at T0+3."""
    return failed_then_cleared(rules).step(T0 + 3, rules, {}).lifecycle


def test_an_xid_fails_the_gpu_and_its_clear_starts_a_burn_in_that_returns_it() -> None:
    first = Lifecycle().step(T0, RULES, {0: 79})
    assert states(first.lifecycle) == {0: "failed"}
    (t,) = first.transitions
    assert (t.gpu, t.before, t.after, t.reason, t.events) == (0, GpuState.IN_SERVICE, GpuState.FAILED, "Xid 79", ())
    assert first.lifecycle.step(T0 + 0.5, RULES, {0: 79}).transitions == ()  # still standing: nothing new

    cleared = first.lifecycle.step(T0 + 1, RULES, {})
    assert states(cleared.lifecycle) == {0: "burn-in"} and cleared.transitions[0].events == ()
    assert cleared.lifecycle.next_change(RULES) == T0 + 3

    early = cleared.lifecycle.step(T0 + 2.999, RULES, {})
    assert states(early.lifecycle) == {0: "burn-in"} and early.transitions == ()
    done = early.lifecycle.step(T0 + 3, RULES, {})
    assert states(done.lifecycle) == {} and done.lifecycle.next_change(RULES) is None
    (t,) = done.transitions
    assert t.after is GpuState.IN_SERVICE and t.events == (GpuEvent.BURN_IN_PASSED, GpuEvent.RETURNED)
    (burn_in,) = done.lifecycle.burn_ins
    assert (burn_in.gpu, burn_in.started, burn_in.ended, burn_in.passed) == (0, T0 + 1, T0 + 3, True)
    assert done.lifecycle.records[0].returned_at == T0 + 3


def test_only_the_gpus_out_of_service_are_listed_and_the_document_says_why() -> None:
    lc = Lifecycle().step(T0, RULES, {0: 79, 2: 48}).lifecycle.step(T0 + 1, RULES, {2: 48}).lifecycle
    assert list(lc.out_of_service()) == [0, 2]
    doc = lc.document()
    assert doc["gpus"]["0"]["state"] == "burn-in" and doc["gpus"]["0"]["since"] == T0 + 1
    assert doc["gpus"]["2"] == {"state": "failed", "since": T0, "reason": "Xid 48"}
    assert doc["burn_ins"] == []
    assert Lifecycle().document() == {} and Lifecycle().annotation() is None
    back = returned()
    assert back.document()["gpus"] == {} and back.document()["burn_ins"][0]["passed"] is True
    assert json.loads(back.annotation() or "") == back.document()


def test_a_burn_in_failed_by_an_injected_diagnostic_holds_the_gpu() -> None:
    lc = failed_then_cleared()
    step = lc.step(T0 + 3, RULES, {}, {0: "d1"})
    assert states(step.lifecycle) == {0: "held"}
    (t,) = step.transitions
    assert t.events == (GpuEvent.BURN_IN_FAILED, GpuEvent.HELD)
    assert step.lifecycle.records[0].reason == "burn-in failed: diagnostic failed (injected d1)"
    (burn_in,) = step.lifecycle.burn_ins
    assert (burn_in.passed, burn_in.detail) == (False, "diagnostic failed (injected d1)")
    later = step.lifecycle.step(T0 + 1000, RULES, {}, {})  # the diagnostic's entry removed: held still
    assert states(later.lifecycle) == {0: "held"} and later.transitions == ()


def test_a_diagnostic_for_another_gpu_does_not_fail_this_burn_in() -> None:
    step = failed_then_cleared().step(T0 + 3, RULES, {}, {1: "d1"})
    assert states(step.lifecycle) == {} and step.lifecycle.burn_ins[0].passed


def test_a_gpu_that_fails_again_within_the_window_is_held_when_that_xid_clears() -> None:
    lc = returned()
    again = lc.step(T0 + 13, RULES, {0: 79})  # 10 s after its return at T0+3
    assert states(again.lifecycle) == {0: "failed"}
    held = again.lifecycle.step(T0 + 14, RULES, {})
    assert states(held.lifecycle) == {0: "held"}
    (t,) = held.transitions
    assert t.events == (GpuEvent.HELD,)
    assert t.reason.startswith("flapping: failed again 10.0 s after its return at 1970-01-12T13:46:43.000Z")
    assert held.lifecycle.next_change(RULES) is None  # no burn-in runs for it
    assert len(held.lifecycle.burn_ins) == 1


def test_a_gpu_that_fails_again_after_the_window_is_burnt_in_as_before() -> None:
    lc = returned().step(T0 + 3 + 60.5, RULES, {0: 79}).lifecycle
    assert states(lc.step(T0 + 65, RULES, {}).lifecycle) == {0: "burn-in"}


def test_a_persons_clear_sends_a_held_gpu_to_burn_in_and_forgets_its_flap_history() -> None:
    held = returned().step(T0 + 13, RULES, {0: 79}).lifecycle.step(T0 + 14, RULES, {}).lifecycle
    cleared = held.step(T0 + 20, RULES, {}, clears=[0, 1])
    assert states(cleared.lifecycle) == {0: "burn-in"} and cleared.ignored_clears == (1,)
    assert cleared.transitions[0].reason == "cleared by a person"
    back = cleared.lifecycle.step(T0 + 22, RULES, {}).lifecycle
    assert states(back) == {}
    # it returned at T0+22: an Xid 5 s later is flapping again, but measured from that return
    again = back.step(T0 + 27, RULES, {0: 79}).lifecycle.step(T0 + 28, RULES, {})
    assert states(again.lifecycle) == {0: "held"} and "failed again 5.0 s" in again.transitions[0].reason


def test_a_clear_of_a_gpu_that_is_not_held_does_nothing() -> None:
    failed = Lifecycle().step(T0, RULES, {0: 79}).lifecycle
    step = failed.step(T0 + 1, RULES, {0: 79}, clears=[0, 3])
    assert states(step.lifecycle) == {0: "failed"} and step.ignored_clears == (0, 3) and step.transitions == ()


def test_a_clear_of_a_returned_gpu_forgets_its_flap_history_and_nothing_else() -> None:
    vouched = returned().step(T0 + 5, RULES, {}, clears=[0])
    assert states(vouched.lifecycle) == {} and vouched.transitions == () and vouched.ignored_clears == ()
    # an Xid 10 s after its return is now a first failure: burnt in when it clears, not held
    again = vouched.lifecycle.step(T0 + 13, RULES, {0: 79}).lifecycle.step(T0 + 14, RULES, {})
    assert states(again.lifecycle) == {0: "burn-in"}
    # without the clear the same Xid is a flap
    flapped = returned().step(T0 + 13, RULES, {0: 79}).lifecycle.step(T0 + 14, RULES, {})
    assert states(flapped.lifecycle) == {0: "held"}


def test_one_write_that_removes_the_xid_and_clears_the_hold_returns_the_gpu_through_burn_in() -> None:
    failed_flapping = returned().step(T0 + 13, RULES, {0: 79}).lifecycle
    step = failed_flapping.step(T0 + 14, RULES, {}, clears=[0])
    assert [t.after for t in step.transitions] == [GpuState.HELD, GpuState.BURN_IN]
    assert states(step.lifecycle) == {0: "burn-in"}


def test_a_cleared_gpu_whose_xid_still_stands_is_failed_not_burnt_in() -> None:
    held = failed_then_cleared().step(T0 + 3, RULES, {}, {0: "d1"}).lifecycle
    held = held.step(T0 + 4, RULES, {0: 48}).lifecycle  # an Xid on a held GPU: held still
    assert states(held) == {0: "held"}
    step = held.step(T0 + 5, RULES, {0: 48}, clears=[0])
    assert states(step.lifecycle) == {0: "failed"}
    assert states(step.lifecycle.step(T0 + 6, RULES, {}).lifecycle) == {0: "burn-in"}  # no flap history left


def test_an_xid_during_burn_in_fails_the_gpu_again_and_that_burn_in_is_not_recorded() -> None:
    lc = failed_then_cleared()
    step = lc.step(T0 + 2, RULES, {0: 94})
    assert states(step.lifecycle) == {0: "failed"} and step.transitions[0].reason == "Xid 94 during its burn-in"
    assert step.lifecycle.burn_ins == ()
    assert states(step.lifecycle.step(T0 + 3, RULES, {0: 94}).lifecycle) == {0: "failed"}  # no burn-in to end
    again = step.lifecycle.step(T0 + 4, RULES, {}).lifecycle
    assert again.records[0].since == T0 + 4 and again.next_change(RULES) == T0 + 6  # a fresh burn-in


def test_return_without_burn_in_returns_the_gpu_when_its_xid_clears() -> None:
    rules = LifecycleRules(burn_in=False)
    lc = Lifecycle().step(T0, rules, {0: 79}).lifecycle
    step = lc.step(T0 + 1, rules, {}, {0: "d1"})  # a failing diagnostic changes nothing: none runs
    assert states(step.lifecycle) == {} and step.lifecycle.burn_ins == ()
    assert step.transitions[0].events == (GpuEvent.RETURNED,)
    assert step.lifecycle.document() == {}


def test_return_without_burn_in_still_holds_a_flapping_gpu() -> None:
    rules = LifecycleRules(burn_in=False)
    lc = Lifecycle().step(T0, rules, {0: 79}).lifecycle.step(T0 + 1, rules, {}).lifecycle
    held = lc.step(T0 + 5, rules, {0: 79}).lifecycle.step(T0 + 6, rules, {}).lifecycle
    assert states(held) == {0: "held"}
    assert states(held.step(T0 + 7, rules, {}, clears=[0]).lifecycle) == {}


def test_flap_back_burns_in_and_returns_a_gpu_that_failed_again_within_the_window() -> None:
    rules = LifecycleRules(hold_flapping=False)
    lc = returned(rules).step(T0 + 13, rules, {0: 79}).lifecycle
    step = lc.step(T0 + 14, rules, {})
    assert states(step.lifecycle) == {0: "burn-in"}
    assert states(step.lifecycle.step(T0 + 16, rules, {}).lifecycle) == {}


def test_burn_in_records_keep_the_last_sixteen() -> None:
    lc = Lifecycle()
    t = T0
    for _ in range(BURN_INS_KEPT + 3):
        lc = lc.step(t, RULES, {1: 79}).lifecycle.step(t + 1, RULES, {}).lifecycle.step(t + 3, RULES, {}).lifecycle
        t += 100  # beyond the flap window: each one is burnt in
    assert len(lc.burn_ins) == BURN_INS_KEPT and lc.burn_ins[-1].ended == t - 100 + 3
    assert lc.burn_ins[0].started == T0 + 3 * 100 + 1


def test_a_restarted_agent_keeps_the_holds_and_burns_in_the_rest_again() -> None:
    before = returned().step(T0 + 10, RULES, {1: 79, 2: 79}).lifecycle.step(T0 + 11, RULES, {2: 79}).lifecycle
    before = before.step(T0 + 12, RULES, {2: 79, 3: 48}).lifecycle  # 1 burns in, 2 and 3 failed
    held = failed_then_cleared(at=T0 + 20).step(T0 + 23, RULES, {}, {0: "d1"}).lifecycle
    doc = json.loads(before.annotation() or "")
    doc["gpus"]["0"] = held.document()["gpus"]["0"]
    restored = Lifecycle.restored(json.dumps(doc), T0 + 50, RULES, 4)
    assert states(restored) == {0: "held", 1: "burn-in", 2: "burn-in", 3: "burn-in"}
    assert restored.records[0].reason == "burn-in failed: diagnostic failed (injected d1)"
    assert before.state(1) is GpuState.BURN_IN and before.state(2) is GpuState.FAILED
    assert restored.records[1].since == T0 + 50 and len(restored.burn_ins) == 1
    assert states(Lifecycle.restored(json.dumps(doc), T0 + 50, LifecycleRules(burn_in=False), 4)) == {0: "held"}


@pytest.mark.parametrize("raw", [None, "", "not json", "[]", '{"gpus": [1]}',
                                 '{"gpus": {"9": {"state": "held", "since": 1}, "x": {}}, "burn_ins": [{"gpu": 1}]}'])
def test_a_restart_from_nothing_or_nonsense_starts_clean(raw: str | None) -> None:
    assert Lifecycle.restored(raw, T0, RULES, 4) == Lifecycle()


def test_the_injected_diagnostics_are_read_and_malformed_entries_skipped_with_a_reason() -> None:
    raw = json.dumps([{"id": "d1", "gpu": 0, "result": "fail"}, {"id": "d2", "gpu": 0, "result": "fail"},
                      {"id": "d3", "gpu": 9, "result": "fail"}, {"gpu": 1, "result": "fail"},
                      {"id": "d5", "gpu": True, "result": "fail"}, {"id": "d6", "gpu": 2, "result": "pass"}, 7])
    diags, problems = parse_diag_entries(raw, 4)
    assert diags == {0: "d1"}
    assert len(problems) == 5 and all(p.startswith("firedrill.dev/inject-diag entry") for p in problems)
    assert parse_diag_entries('{"id": "d1", "gpu": 3, "result": "fail"}', 4) == ({3: "d1"}, [])
    assert parse_diag_entries(None, 4) == ({}, []) and parse_diag_entries("", 4) == ({}, [])
    assert parse_diag_entries("{", 4)[1][0].startswith("firedrill.dev/inject-diag is not JSON")
    assert parse_diag_entries("3", 4)[1] == ["firedrill.dev/inject-diag must be a JSON list of entries"]


@pytest.mark.parametrize("kwargs", [{"burn_in_seconds": 0.0}, {"burn_in_seconds": float("nan")},
                                    {"flap_window_seconds": -1.0}])
def test_rules_refuse_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LifecycleRules(**kwargs)
