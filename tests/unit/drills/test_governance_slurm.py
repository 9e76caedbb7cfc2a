"""The governance drill's Slurm side, its pure parts: a QOS's GPU limit, which pending reasons are a limit's,
how Slurm's clients say they were refused, and slurmctld's log read as the record of each refusal."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from drills.kinds.governance.slurm import _refused, limit_reason, qos_gpu_limit
from drills.kinds.governance.textlog import CommandAnswer, LineQuery, TextLog
from drills.target.profile import load_profile

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("grp_tres, limit", [("gres/gpu=4", 4), ("cpu=8,gres/gpu=16,mem=1G", 16), ("", None),
                                             ("cpu=8", None), ("gres/gpu:h100=2", None)])
def test_the_gpu_limit_of_a_qos_is_its_untyped_gres_gpu(grp_tres: str, limit: int | None) -> None:
    assert qos_gpu_limit(grp_tres) == limit


@pytest.mark.parametrize("reason, held", [("QOSGrpGRES", True), ("AssocGrpGRES", True), ("QOSMaxGRESPerJob", True),
                                          ("Resources", False), ("Priority", False), ("None", False)])
def test_only_a_limits_reason_is_the_quota_holding_a_job(reason: str, held: bool) -> None:
    assert limit_reason(reason) is held


def test_slurms_refusals_are_told_from_other_failures() -> None:
    assert _refused(CommandAnswer("scontrol", 1, stderr="slurm_update error: Invalid user id"))
    assert _refused(CommandAnswer("scancel", 210, stderr="scancel: error: Kill job error on job id 7: "
                                                         "Access/permission denied"))
    assert not _refused(CommandAnswer("scontrol", 1, stderr="slurm_update error: Invalid node name specified"))
    assert CommandAnswer("sbatch", -1, stderr="timed out").describe() == "sbatch did not answer: timed out"


def test_each_refusal_is_one_line_of_the_log_after_the_attempt(tmp_path: Path) -> None:
    path = tmp_path / "slurmctld.log"
    path.write_text("[t0] error: Security violation, UPDATE_NODE RPC from uid=999\n")
    log = TextLog(path, "slurmctld's log")
    since = log.end()
    query = LineQuery(("Security violation, UPDATE_NODE RPC", "uid=999"))
    never = lambda _: None  # noqa: E731 - the log is complete: no waiting
    assert log.wait_for(query, since, 0, lambda: 0.0, never) is None  # the old line recorded an earlier attempt
    with path.open("a") as fh:
        fh.write("[t1] error: Security violation, UPDATE_NODE RPC from uid=999\n"
                 "[t2] error: Security violation, UPDATE_NODE RPC from uid=999\n[t3] half a li")
    first = log.wait_for(query, since, 0, lambda: 0.0, never)
    assert first is not None and first.text.startswith("[t1]") and first.offset == since
    assert first.digest == hashlib.sha256(first.text.encode()).hexdigest()
    second = log.wait_for(query, since, 0, lambda: 0.0, never, exclude={first.offset})
    assert second is not None and second.text.startswith("[t2]")
    assert [line.text[:4] for line in log.lines()] == ["[t0]", "[t1]", "[t2]"]  # a line still being written waits
    path.write_text("[t4] rotated\n")  # a rotated log is read from its start
    assert [line.text for line in log.lines()] == ["[t4] rotated"]


def test_a_slurm_profile_names_the_tenant_and_the_log(tmp_path: Path) -> None:
    text = (REPO / "examples" / "profile-slurm.yaml").read_text()
    assert "governance:" in text
    profile = load_profile(REPO / "examples" / "profile-slurm.yaml")
    gov = profile.slurm.governance
    assert gov.tenant_command and gov.tenant_qos and gov.controller_log and gov.restricted_qos
    assert profile.to_dict()["slurm"]["governance"]["tenant_qos"] == gov.tenant_qos
