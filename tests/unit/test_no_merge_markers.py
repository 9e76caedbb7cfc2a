"""No file of the repository carries a merge's conflict markers (one reached README.md once, unseen by any test)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
SUFFIXES = {".py", ".md", ".feature", ".yaml", ".yml", ".toml", ".j2", ".sh", ".txt", ".cfg"}
SKIP = {".git", "node_modules", ".venv", ".venv-ray", "build", "dist"}


def test_no_file_carries_conflict_markers() -> None:
    found = []
    for path in REPO.rglob("*"):
        if path.suffix not in SUFFIXES or not path.is_file() or SKIP & set(path.relative_to(REPO).parts):
            continue
        text = path.read_text(errors="replace")
        for match in MARKER.finditer(text):
            found.append(f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}")
    assert found == [], "conflict markers left by a merge: " + ", ".join(found)
