"""Each contract clause of the shipped features is stated by one scenario: the report's clause table, the
conformance output and the trend rules key on the clause, so two scenarios under one number would merge two
promises (the straggler and blip features once both numbered theirs 13.x)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

FEATURES = Path(__file__).resolve().parents[3] / "features"


def test_every_clause_number_is_used_by_one_scenario() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for feature in sorted(FEATURES.glob("*.feature")):
        for n, line in enumerate(feature.read_text().splitlines(), start=1):
            for clause in re.findall(r"@clause:(\S+)", line):
                where[clause].append(f"{feature.name}:{n}")
    assert where, "no @clause: tag found in features/"
    assert {c: w for c, w in where.items() if len(w) > 1} == {}
