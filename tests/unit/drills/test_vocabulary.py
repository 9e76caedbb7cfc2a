"""The step vocabulary: documented, parseable, and helpful when a step is mistyped."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.bdd import steps as _steps  # noqa: F401 - registers the vocabulary
from drills.errors import PlaceholderError
from drills.scenario.vocabulary import (SENTENCES, VOCABULARY, check, markdown, matches, near_miss, parse_duration,
                                        suggest)

REPO = Path(__file__).resolve().parents[3]


def test_docs_steps_md_is_generated_from_the_code() -> None:
    assert (REPO / "docs" / "STEPS.md").read_text() == markdown(), \
        "docs/STEPS.md is stale: regenerate it with `firedrill steps --markdown > docs/STEPS.md`"


@pytest.mark.parametrize("text, seconds", [("5 seconds", 5.0), ("500 ms", 0.5), ("2 minutes", 120.0),
                                           ("1.5 s", 1.5), ("1 second", 1.0), ("8 hours", 28800.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_duration_without_a_known_unit_is_refused() -> None:
    with pytest.raises(PlaceholderError, match="unknown unit 'fortnights'; write one of ms, .*e.g. '5 seconds'"):
        parse_duration("5 fortnights")
    with pytest.raises(PlaceholderError, match="a duration of zero"):
        parse_duration("0 s")


def test_every_example_matches_and_every_step_is_documented() -> None:
    assert len(VOCABULARY) >= 15
    for doc in VOCABULARY:
        assert matches(doc.example), doc.example
        assert doc.doc, f"step '{doc.pattern}' has no docstring"


def test_every_example_is_one_sentence_and_its_values_pass_the_steps_own_parsers() -> None:
    for doc in VOCABULARY:
        assert sum(1 for s in SENTENCES if s.shape.is_matching(doc.example)) == 1, doc.example
        assert [s.parser.is_matching(doc.example) for s in SENTENCES].count(True) == 1, doc.example
        check(doc.example, doc.keyword)  # raises PlaceholderError if the documented example were refused


def test_checked_values_are_what_the_step_receives() -> None:
    from drills.target.leakreport.model import Hole
    from drills.target.profile import FaultMethod
    assert check("I pull the node of worker 1 with hang") == {"rank": 1, "method": FaultMethod.HANG}
    assert check("I pull the node of worker 0 with the configured fault method")["method"] is None
    assert check("a workload mix that leaks GPU time through fault tolerance for 2 minutes") == {
        "hole": Hole.FAULT_TOLERANCE, "seconds": 120.0}


def test_a_step_used_with_the_wrong_keyword_is_named(tmp_path: Path) -> None:
    from drills.bdd.features import FeatureError, load_features
    (tmp_path / "f.feature").write_text("Feature: x\n  Scenario: y\n    Given I submit a gang of 4 workers with 8 GPUs each\n")
    with pytest.raises(FeatureError) as exc:
        load_features(tmp_path)
    assert "f.feature:3:" in str(exc.value) and "is a When step but is used as Given" in str(exc.value)


def test_each_examples_row_of_an_outline_is_a_scenario_with_its_own_steps(tmp_path: Path) -> None:
    from drills.bdd.features import load_features
    (tmp_path / "f.feature").write_text(
        "Feature: x\n  Scenario Outline: the <hole> hole\n"
        "    Given a workload mix that leaks GPU time through <hole> for 12 seconds\n"
        "    Then it names <hole> as the largest hole\n"
        "    Examples:\n      | hole |\n      | data pipeline |\n      | fragmentation |\n")
    [feature] = load_features(tmp_path)
    assert [s.name for s in feature.scenarios] == ["the data pipeline hole", "the fragmentation hole"]
    assert feature.scenarios[1].steps == ("a workload mix that leaks GPU time through fragmentation for 12 seconds",
                                          "it names fragmentation as the largest hole")


def test_an_outline_row_naming_no_known_hole_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from drills.bdd.features import FeatureError, load_features
    (tmp_path / "f.feature").write_text(
        "Feature: x\n  Scenario Outline: y\n    Then it names <hole> as the largest hole\n"
        "    Examples:\n      | hole |\n      | fragmentation |\n      | the kitchen sink |\n")
    with pytest.raises(FeatureError) as exc:
        load_features(tmp_path)
    [problem] = exc.value.problems  # the fragmentation row is fine
    assert problem.startswith(f"{tmp_path / 'f.feature'}:7: <hole> 'the kitchen sink': unknown hole; write one of "
                              "data pipeline, communication, fragmentation, fault tolerance")
    assert "Examples row for \"Then it names <hole> as the largest hole\" at line 3" in problem
    [bad] = exc.value.placeholders
    assert (bad.file, bad.line, bad.value) == (str(tmp_path / "f.feature"), 7, "the kitchen sink")


def test_a_unit_is_checked_by_the_sentence_that_takes_it() -> None:
    assert check("the platform detects the failure within 750 ms") == {"limit": 0.75}
    assert matches("the platform detects the failure within 5 parsecs")  # the sentence is known; its unit is not
    with pytest.raises(PlaceholderError, match=r"<duration> '5 parsecs': unknown unit 'parsecs'"):
        check("the platform detects the failure within 5 parsecs")


def test_suggestions_for_a_typo() -> None:
    assert suggest("I submit a gang of 4 workres with 8 GPUs each")[0] == \
        "I submit a gang of <n workers> with <n GPUs> each"


@pytest.mark.parametrize("text", [
    "a canary training job of 1 worker with 1 GPU each, checkpointing every 1 step",
    "I submit a gang of 1 worker with 1 GPU each",
    "1 node, the job's among them, lose the control plane for 10 seconds",
    "a GPU node with at least 1 GPU free",
    "another job holds 1 GPU on each node of one rack",
    "an inference service of 1 replica with 8 GPUs each behind a load balancer",
    "I submit 1 gang of 2 workers with 8 GPUs each at the same time, each running for 5 seconds",
])
def test_a_count_of_one_is_written_as_a_person_writes_it(text: str) -> None:
    assert matches(text), text
    assert 1 in check(text).values()


def test_a_sentence_near_a_known_one_says_exactly_what_to_write() -> None:
    assert near_miss("at most 1 step of work is lost") == 'write "at most 1 steps of work are lost"'
    assert near_miss("the platform detects the failure within five seconds") == (
        "it is the sentence 'the platform detects the failure within <duration>', but <duration> 'five seconds': "
        "not a duration; write a number and a unit, e.g. '5 seconds', '500 ms', '2 minutes'")
    assert near_miss("the moon is made of cheese") is None
    assert "the platform detects the failure within <duration>" in suggest("the platform detect failure within 5 s")
