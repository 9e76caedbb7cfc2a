"""``firedrill run --profile`` against a real Ray cluster of this suite, as a site's engineer types it: the profile
the site would write for it (the dashboard, the Ray Train canary on the suite's Python, a storage folder every
node sees, this cluster's power switch ``nodectl.py`` as the fault and restore commands), a shipped scenario with
its time windows fitted (``scenario``, shared with tests/realslurm), the process and its evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.realray.cluster import ALLOW_RESOURCE, RayCluster
from tests.realslurm.drill import scenario

__all__ = ["CLI", "NODECTL", "REPO", "firedrill_run", "profile_yaml", "scenario"]

REPO = Path(__file__).resolve().parents[2]
NODECTL = Path(__file__).with_name("nodectl.py")
CLI = [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'platform')!r}]; "
                            "from drills.cli import main; main()"]
"""The harness on the suite's interpreter from this checkout (the Ray venv has no `firedrill` script of its own,
and an editable install may point at another checkout)."""


TRAIN_POLL_S = 0.5
"""Ray Train's controller polls its workers every ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` (2 s by default): tuned
with the GCS health check, as a site that promises fast recovery sets it."""


def profile_yaml(cluster: RayCluster, storage: Path, *, max_failures: int = 2, gang_form: str = "placement-group",
                 max_gpu_share: float = 0.4, train_poll_s: float | None = TRAIN_POLL_S) -> str:
    """The profile a site writes for ``cluster``: its dashboard, the canary under Ray Train on this Python,
    ``storage`` for Train's checkpoints, a node killed or hung by ``nodectl.py`` as the scenario's ``{fault}``
    says and brought back by it; only nodes with the ``firedrill`` resource may be pulled (never the head)."""
    ctl = f"{sys.executable} {NODECTL} {cluster.root}"
    return "\n".join([
        "apiVersion: firedrill.dev/v1alpha1", "kind: TargetProfile", "name: realray", "platform: ray",
        "ray:", f"  dashboard: {cluster.dashboard_url}",
        f"  canary_command: [{json.dumps(sys.executable)}, \"-m\", \"drills.canary.raytrain\"]",
        f"  storage_path: {json.dumps(str(Path(storage).resolve()))}",
        f"  max_failures: {max_failures}", f"  gang_form: {gang_form}",
        "  cpus_per_worker: 0",  # the test nodes declare 1 CPU each
        '  env_vars: {RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER: "0"'
        + (f', RAY_TRAIN_HEALTH_CHECK_INTERVAL_S: "{train_poll_s:g}"' if train_poll_s is not None else "") + "}",
        "fault:", "  method: command", f"  command_template: {json.dumps(ctl + ' {fault} {node}')}",
        f"  restore_template: {json.dumps(ctl + ' restore {node}')}",
        "  stand_ins: {kill: command, hang: command}",
        "  timeout_seconds: 60",
        "safety:", f"  allow_resource: {ALLOW_RESOURCE}", "  max_nodes: 1", f"  max_gpu_share: {max_gpu_share}", ""])


def firedrill_run(cluster: RayCluster, work: Path, feature_text: str, *, name: str = "node_pull.feature",
                  max_failures: int = 2, gang_form: str = "placement-group", train_poll_s: float | None = TRAIN_POLL_S,
                  timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``firedrill run`` of ``feature_text`` against ``cluster``; the process and the scenarios of its evidence."""
    storage = work / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    (work / "features").mkdir(parents=True, exist_ok=True)
    (work / "features" / name).write_text(feature_text)
    profile = work / "profile.yaml"
    profile.write_text(profile_yaml(cluster, storage, max_failures=max_failures, gang_form=gang_form,
                                    train_poll_s=train_poll_s))
    proc = subprocess.run([*CLI, "run", "--profile", str(profile), "--features", str(work / "features"),
                           "--reports", str(work / "reports"), "--no-live"],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**cluster.env, "FIREDRILL_STATE_DIR": str(work / "state")})
    records = sorted((work / "reports").glob("*/record.json"))
    assert records, f"firedrill run left no evidence (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(records[-1].read_text())["scenarios"]
