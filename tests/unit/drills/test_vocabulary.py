"""The step vocabulary: documented, parseable, and helpful when a step is mistyped."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.bdd import steps as _steps  # noqa: F401 - registers the vocabulary
from drills.bdd.vocabulary import VOCABULARY, markdown, matches, parse_duration, suggest

REPO = Path(__file__).resolve().parents[3]


def test_docs_steps_md_is_generated_from_the_code() -> None:
    assert (REPO / "docs" / "STEPS.md").read_text() == markdown(), \
        "docs/STEPS.md is stale: regenerate it with `firedrill steps --markdown > docs/STEPS.md`"


@pytest.mark.parametrize("text, seconds", [("5 seconds", 5.0), ("500 ms", 0.5), ("2 minutes", 120.0),
                                           ("1.5 s", 1.5), ("1 second", 1.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_duration_without_a_known_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="write e.g. '5 seconds'"):
        parse_duration("5 fortnights")


def test_every_example_matches_and_every_step_is_documented() -> None:
    assert len(VOCABULARY) >= 15
    for doc in VOCABULARY:
        assert matches(doc.example), doc.example
        assert doc.doc, f"step '{doc.pattern}' has no docstring"


def test_a_step_used_with_the_wrong_keyword_is_named(tmp_path: Path) -> None:
    from drills.features import FeatureError, load_features
    (tmp_path / "f.feature").write_text("Feature: x\n  Scenario: y\n    Given I submit a gang of 4 workers with 8 GPUs each\n")
    with pytest.raises(FeatureError) as exc:
        load_features(tmp_path)
    assert "f.feature:3:" in str(exc.value) and "is a When step but is used as Given" in str(exc.value)


def test_units_are_part_of_the_sentence() -> None:
    assert matches("the platform detects the failure within 750 ms")
    assert not matches("the platform detects the failure within 5 parsecs")


def test_suggestions_for_a_typo() -> None:
    assert suggest("I submit a gang of 4 worker with 8 GPU each")[0] == \
        "I submit a gang of <workers> workers with <gpus> GPUs each"
    assert "the platform detects the failure within <duration>" in suggest("the platform detect failure within 5 s")
