"""A run on a reference platform started with defects (docs/DEFECTS.md) says so in all of its evidence."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from drills.bdd.run import RunOptions, check_defects
from drills.errors import FiredrillError
from drills.records.evidence import statements as st
from drills.records.evidence.archive import seal
from drills.records.evidence.record import RunRecord
from drills.records.evidence.report import SignatureStatus, render_report
from drills.records.evidence.signing import Signer
from drills.records.evidence.verify import verify
from tests.unit.evidence.conftest import make_record, make_run_dir

SIG = SignatureStatus("k" * 64, ephemeral=True)


def _with_defects(*names: str) -> RunRecord:
    record = make_record()
    return dataclasses.replace(record, target=dataclasses.replace(record.target, defects=names))


def test_an_honest_record_names_no_defect_anywhere() -> None:
    record = make_record()
    assert record.target.defects == ()
    assert "defects" not in st.scenario_predicate(record, record.scenarios[0], timeline_sha256="c" * 64)["target"]
    html = render_report(record, SIG)
    assert 'data-testid="defects"' not in html and "defect zoo" not in html


def test_the_defects_survive_the_record_round_trip_and_reach_statement_and_report() -> None:
    record = _with_defects("no-spare", "slow-detect")
    again = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and again.target.defects == ("no-spare", "slow-detect")
    predicate = st.scenario_predicate(record, record.scenarios[0], timeline_sha256="c" * 64)
    assert predicate["target"]["defects"] == ["no-spare", "slow-detect"]
    html = render_report(record, SIG)
    assert 'data-testid="target-defects">no-spare, slow-detect<' in html
    assert "it is not an acceptance of any platform" in html


def test_an_old_record_without_defects_still_reads() -> None:
    data = make_record().to_dict()
    del data["target"]["defects"]
    assert RunRecord.from_dict(data).target.defects == ()


def test_a_sealed_defect_run_verifies_and_keeps_its_defects(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    run_dir = make_run_dir(reports)
    record = _with_defects("leaky-mig")
    seal(run_dir, record, Signer.generate_ephemeral(), reports / "ledger.jsonl")
    assert verify(run_dir).ok
    stored = json.loads((run_dir / "record.json").read_text())
    assert stored["target"]["defects"] == ["leaky-mig"]


@pytest.mark.parametrize(("options", "words"), [
    (RunOptions(Path("features"), defects=("flaky-disk",)), "unknown defect 'flaky-disk'; the defect zoo has: "),
    (RunOptions(Path("features"), kubeconfig=Path("kc"), defects=("no-spare",)),
     "defects exist only on the reference platform"),
    (RunOptions(Path("features"), context="prod", defects=("no-spare",)),
     "defects exist only on the reference platform"),
])
def test_bad_defect_options_are_refused_saying_why(options: RunOptions, words: str) -> None:
    with pytest.raises(FiredrillError, match=words):
        check_defects(options)


def test_good_defect_options_are_checked_and_sorted() -> None:
    assert check_defects(RunOptions(Path("f"))) == ()
    assert check_defects(RunOptions(Path("f"), defects=("slow-detect", "no-spare,slow-detect"))) == (
        "no-spare", "slow-detect")
