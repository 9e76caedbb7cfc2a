"""Reading the contract: feature files are checked before anything runs.

A customer edits ``features/*.feature`` without Python, so a mistake must be
reported the way a compiler would: the file, the line, what is wrong, and for
an unknown step the closest sentences the vocabulary knows; for a value a
placeholder cannot take (a unit, a hole, a fault method, a count of zero, a
layout the GPU model cannot hold) the values it can.  The values are checked
by the very parsers the steps run with (:func:`drills.scenario.vocabulary.check`).
Nothing is started (no platform, no cluster connection) until every file
checks out: ``firedrill run`` and ``firedrill run --dry-run`` both begin here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gherkin.errors import CompositeParserException, ParserError, ParserException
from gherkin.parser import Parser

from drills.bdd import steps as _steps  # noqa: F401 - registers the vocabulary
from drills.errors import FiredrillError, PlaceholderError
from drills.records.score import SEVERITY_TAG, SeverityError, parse_severity
from drills.scenario.vocabulary import (Checked, check, check_scenario, keyword_of, matches, near_miss, sentence_of,
                                        suggest)


class FeatureError(FiredrillError):
    """One or more feature files cannot be run; ``problems`` holds one line per problem (file:line: ...),
    ``placeholders`` the bad values among them, each with its file and line."""

    def __init__(self, problems: list[str], placeholders: list[PlaceholderError] | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.placeholders = placeholders or []

    def lines(self, what: str = "the features cannot run") -> list[str]:
        """How a command reports it: a heading with the count, then one indented line per problem."""
        return [f"error: {what} ({len(self.problems)} problem(s)):", *(f"  {p}" for p in self.problems)]


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    line: int
    tags: tuple[str, ...]
    steps: tuple[str, ...]
    example: tuple[tuple[str, str], ...] = ()
    """A Scenario Outline's Examples row this scenario is (column, value pairs in column order); () otherwise."""


@dataclass
class FeatureInfo:
    path: Path
    name: str
    tags: tuple[str, ...]
    scenarios: list[ScenarioInfo] = field(default_factory=list)


KEYWORD_TYPES = {"Context": "Given", "Action": "When", "Outcome": "Then"}
"""gherkin's keywordType of Given/When/Then; And/But ("Conjunction") continue the previous one."""


def _tags(node: dict[str, Any]) -> tuple[str, ...]:
    return tuple(t["name"].lstrip("@") for t in node.get("tags") or [])


def _rows(examples: list[dict[str, Any]]) -> list[tuple[dict[str, str], int]]:
    """The rows of a Scenario Outline's Examples tables, as ({column: value}, line)."""
    rows: list[tuple[dict[str, str], int]] = []
    for ex in examples:
        header = [c["value"] for c in (ex.get("tableHeader") or {}).get("cells") or []]
        for row in ex.get("tableBody") or []:
            rows.append((dict(zip(header, (c["value"] for c in row.get("cells") or []))), row["location"]["line"]))
    return rows


def _placed(exc: PlaceholderError, path: Path, step: dict[str, Any], text: str,
            row: tuple[dict[str, str], int] | None) -> PlaceholderError:
    """The bad value placed where it is written: the Examples row that supplied it, else the step's line."""
    line = step["location"]["line"]
    used = [row[0].get(col, "").strip() for col in re.findall(r"<(\w[^>]*)>", step["text"])] if row else []
    if row is not None and any(v and (v in exc.value or exc.value.strip() in v) for v in used):
        return PlaceholderError(exc.value, exc.problem, f"{exc.fix} (in the Examples row for \"{step['keyword'].strip()} "
                                f"{step['text']}\" at line {line})", placeholder=exc.placeholder, file=str(path),
                                line=row[1])
    return PlaceholderError(exc.value, exc.problem, f"{exc.fix} (in \"{step['keyword'].strip()} {text}\")",
                            placeholder=exc.placeholder, file=str(path), line=line)


def _fill(text: str, row: dict[str, str] | None) -> str:
    """``text`` with each ``<column>`` of an Examples row substituted (unchanged without a row)."""
    if row is None:
        return text
    return re.sub(r"<(\w[^>]*)>", lambda m: row.get(m.group(1), m.group(0)), text)


def load_feature(path: Path) -> tuple[FeatureInfo | None, list[str]]:
    """One feature file, read and checked: its scenarios (one per Examples row of an outline) and one line per
    problem (``file:line: ...``), each bad value once."""
    info, problems, _ = _load(path)
    return info, problems


def _load(path: Path) -> tuple[FeatureInfo | None, list[str], list[PlaceholderError]]:
    problems: list[str] = []
    bad_values: list[PlaceholderError] = []
    try:
        doc = Parser().parse(path.read_text(encoding="utf-8"))
    except (CompositeParserException, ParserException, ParserError) as exc:
        errors = getattr(exc, "errors", None) or [exc]
        for err in errors:
            loc = getattr(err, "location", None) or {}
            detail = str(err).split("): ", 1)[-1]
            problems.append(f"{path}:{loc.get('line', '?')}: not valid Gherkin: {detail}")
        return None, problems, []
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{path}: cannot read: {exc}"], []
    feature = doc.get("feature")
    if not feature:
        return None, [f"{path}:1: no 'Feature:' line; every feature file starts with one"], []
    info = FeatureInfo(path, feature["name"], _tags(feature))
    if any(t.lower().startswith(SEVERITY_TAG) for t in info.tags):
        problems.append(f"{path}:{feature['location']['line']}: @severity on the Feature line is not read (the score "
                        "weighs scenarios); put @severity:<level> on each scenario (docs/TRENDS.md)")
    background: list[dict[str, Any]] = []
    children = list(feature.get("children") or [])
    for child in list(children):
        if "rule" in child:
            children += child["rule"].get("children") or []
    for child in children:
        if "background" in child:
            background += child["background"].get("steps") or []
            continue
        scenario = child.get("scenario")
        if scenario is None:
            continue
        # A Scenario Outline runs once per Examples row: each row is a scenario of its own, with its own steps.
        rows: list[tuple[dict[str, str], int] | None] = list(_rows(scenario.get("examples") or [])) or [None]
        steps = background + (scenario.get("steps") or [])
        for row in rows:
            texts: list[str] = []
            checked: list[tuple[Checked, dict[str, Any], str]] = []
            unchecked = False
            current = None
            for st in steps:
                kind = KEYWORD_TYPES.get(st.get("keywordType", ""), current)
                current = kind
                text = _fill(st["text"], row[0] if row is not None else None)
                texts.append(text)
                if matches(text) and not matches(text, kind):
                    problems.append(f"{path}:{st['location']['line']}: \"{st['keyword'].strip()} {text}\" is a "
                                    f"{keyword_of(text)} step but is used as {kind}; write it as "
                                    f"\"{keyword_of(text)} {text}\" (or And after a {keyword_of(text)})")
                elif not matches(text):
                    near = near_miss(text)
                    close = suggest(text)
                    hint = (f" {near[0].upper()}{near[1:]}." if near else
                            (" Closest known steps: " + " | ".join(close)) if close else "")
                    problems.append(f"{path}:{st['location']['line']}: unknown step "
                                    f"\"{st['keyword'].strip()} {text}\".{hint} (All steps: docs/STEPS.md)")
                else:
                    try:
                        values = check(text, kind)
                    except PlaceholderError as exc:
                        unchecked = True
                        placed = _placed(exc, path, st, text, row)
                        if str(placed) not in problems:  # a literal value is wrong once, not once per row
                            problems.append(str(placed))
                            bad_values.append(placed)
                    else:
                        found = sentence_of(text, kind)
                        assert found is not None  # check() found it
                        checked.append((Checked(found.name, values, text), st, text))
            # A step whose own value is wrong is left out of the checked steps, so the rules across steps (a watch
            # after what it watches) would blame the steps after it for its absence: they wait for the fix.
            for index, exc in ([] if unchecked else check_scenario([c for c, _, _ in checked])):
                _, st, text = checked[index]
                placed = _placed(exc, path, st, text, row)
                if str(placed) not in problems:
                    problems.append(str(placed))
                    bad_values.append(placed)
            info.scenarios.append(ScenarioInfo(_fill(scenario["name"], row[0] if row is not None else None),
                                               scenario["location"]["line"], _tags(scenario), tuple(texts),
                                               tuple(row[0].items()) if row is not None else ()))
        if not scenario.get("steps"):
            problems.append(f"{path}:{scenario['location']['line']}: scenario \"{scenario['name']}\" has no steps")
        try:
            parse_severity(_tags(scenario), f"{path}:{scenario['location']['line']}")
        except SeverityError as exc:
            problems.append(str(exc))
    return info, problems, bad_values


def load_features(directory: Path) -> list[FeatureInfo]:
    """Every ``*.feature`` under ``directory``, checked; raises FeatureError listing every problem."""
    if not directory.is_dir():
        raise FeatureError([f"{directory}: no such directory; give --features a folder of .feature files"])
    paths = sorted(directory.rglob("*.feature"))
    if not paths:
        raise FeatureError([f"{directory}: no .feature files found"])
    infos, problems, bad_values = [], [], []
    for path in paths:
        info, found, values = _load(path)
        problems += found
        bad_values += values
        if info is not None:
            infos.append(info)
    if problems:
        raise FeatureError(problems, bad_values)
    return infos
