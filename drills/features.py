"""Reading the contract: feature files are checked before anything runs.

A customer edits ``features/*.feature`` without Python, so a mistake must be
reported the way a compiler would: the file, the line, what is wrong, and for
an unknown step the closest sentences the vocabulary knows.  Nothing is
started (no platform, no cluster connection) until every file checks out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gherkin.errors import CompositeParserException, ParserError, ParserException
from gherkin.parser import Parser

from drills.bdd import steps as _steps  # noqa: F401 - registers the vocabulary
from drills.bdd.vocabulary import keyword_of, matches, suggest
from drills.errors import FiredrillError


class FeatureError(FiredrillError):
    """One or more feature files cannot be run; ``problems`` holds one line per problem (file:line: ...)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    line: int
    tags: tuple[str, ...]
    steps: tuple[str, ...]


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


def _rows(examples: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The rows of a Scenario Outline's Examples tables, as {column: value}."""
    rows: list[dict[str, str]] = []
    for ex in examples:
        header = [c["value"] for c in (ex.get("tableHeader") or {}).get("cells") or []]
        for row in ex.get("tableBody") or []:
            rows.append(dict(zip(header, (c["value"] for c in row.get("cells") or []))))
    return rows


def _fill(text: str, row: dict[str, str] | None) -> str:
    """``text`` with each ``<column>`` of an Examples row substituted (unchanged without a row)."""
    if row is None:
        return text
    return re.sub(r"<(\w[^>]*)>", lambda m: row.get(m.group(1), m.group(0)), text)


def load_feature(path: Path) -> tuple[FeatureInfo | None, list[str]]:
    problems: list[str] = []
    try:
        doc = Parser().parse(path.read_text(encoding="utf-8"))
    except (CompositeParserException, ParserException, ParserError) as exc:
        errors = getattr(exc, "errors", None) or [exc]
        for err in errors:
            loc = getattr(err, "location", None) or {}
            detail = str(err).split("): ", 1)[-1]
            problems.append(f"{path}:{loc.get('line', '?')}: not valid Gherkin: {detail}")
        return None, problems
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{path}: cannot read: {exc}"]
    feature = doc.get("feature")
    if not feature:
        return None, [f"{path}:1: no 'Feature:' line; every feature file starts with one"]
    info = FeatureInfo(path, feature["name"], _tags(feature))
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
        rows: list[dict[str, str] | None] = list(_rows(scenario.get("examples") or [])) or [None]
        steps = background + (scenario.get("steps") or [])
        for row in rows:
            texts: list[str] = []
            current = None
            for st in steps:
                kind = KEYWORD_TYPES.get(st.get("keywordType", ""), current)
                current = kind
                text = _fill(st["text"], row)
                texts.append(text)
                if matches(text) and not matches(text, kind):
                    problems.append(f"{path}:{st['location']['line']}: \"{st['keyword'].strip()} {text}\" is a "
                                    f"{keyword_of(text)} step but is used as {kind}; write it as "
                                    f"\"{keyword_of(text)} {text}\" (or And after a {keyword_of(text)})")
                elif not matches(text):
                    close = suggest(text)
                    hint = (" Closest known steps: " + " | ".join(close)) if close else ""
                    problems.append(f"{path}:{st['location']['line']}: unknown step "
                                    f"\"{st['keyword'].strip()} {text}\".{hint} (All steps: docs/STEPS.md)")
            info.scenarios.append(ScenarioInfo(_fill(scenario["name"], row), scenario["location"]["line"],
                                               _tags(scenario), tuple(texts)))
        if not scenario.get("steps"):
            problems.append(f"{path}:{scenario['location']['line']}: scenario \"{scenario['name']}\" has no steps")
    return info, problems


def load_features(directory: Path) -> list[FeatureInfo]:
    """Every ``*.feature`` under ``directory``, checked; raises FeatureError listing every problem."""
    if not directory.is_dir():
        raise FeatureError([f"{directory}: no such directory; give --features a folder of .feature files"])
    paths = sorted(directory.rglob("*.feature"))
    if not paths:
        raise FeatureError([f"{directory}: no .feature files found"])
    infos, problems = [], []
    for path in paths:
        info, found = load_feature(path)
        problems += found
        if info is not None:
            infos.append(info)
    if problems:
        raise FeatureError(problems)
    return infos
