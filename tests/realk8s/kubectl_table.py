"""The same kubectl commands, one by one, against the reference platform and against the real
kube-apiserver; prints the Markdown table of docs/KUBECTL.md.

    python -m tests.realk8s.kubectl_table [--work DIR] [--out FILE]

Starts, on loopback, a reference cluster (API server, the scheduler, one node agent) and the real
control plane of ``tests/realk8s/cluster.py`` (etcd, kube-apiserver, controller-manager, scheduler)
with one refplatform agent as its kubelet (``tests/realk8s/agents.py``), so that pods run as the same
processes on both sides and only the API server differs.  Then it runs :data:`STEPS` with the
machine's kubectl (no extra flags but ``--kubeconfig`` and a ``--cache-dir`` per side), compares each
pair of outputs after masking what always differs (ages, uids, resourceVersions, hashes, ports) and
prints one row per command.  Everything is stopped at the end.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster, RealClusterSpec
from tests.realk8s.conftest import ensure_built
from tests.realk8s.standin import node_user

KUBECTL = shutil.which("kubectl") or "kubectl"
AGENT = "refagent-0"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1
    command: [sh, -c, "sleep 600"]
    env: [{name: A, value: "1"}]
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer}
spec:
  replicas: 1
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - {name: main, image: busybox:1, command: [sh, -c, "sleep 600"]}
"""
FILES = {
    "pod.yaml": POD,
    "pod-v2.yaml": POD.replace("busybox:1", "busybox:2").replace("app: web", "app: web, tier: a"),
    "bad.yaml": POD.replace("name: web", "name: bad").replace("    env:", "    imagee: x\n    env:"),
    "ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: from-file}\n",
    "list.json": '{"apiVersion": "v1", "kind": "List", "items": ['
                 '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}, "data": {"a": "1"}}, '
                 '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}, "data": {"b": "2"}}]}',
    "two.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: job-config}\ndata: {lr: '0.1'}\n---\n"
                "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: job-runner}\n",
    "two-v2.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: job-config}\ndata: {lr: '0.2'}\n---\n"
                   "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: job-runner}\n",
    "ssa.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa, labels: {team: ml}}\n"
                "data: {lr: '0.1', epochs: '3'}\n",
    "ssa-tuner.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {lr: '0.5'}\n",
    "ssa-v2.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {lr: '0.5'}\n",
    "deploy.yaml": DEPLOYMENT,
}


@dataclass(frozen=True)
class Step:
    """One kubectl command line (``{dir}`` is the manifests folder) and why its outputs may differ."""

    args: tuple[str, ...]
    why: str = ""
    """Said in the table only when the two outputs differ: the known reason."""
    summary: bool = False
    """Long output: the table shows its length and the differing lines, not the text."""
    stdin_from: tuple[str, ...] = ()
    """A kubectl command whose output is this one's standard input (``kubectl get -o yaml | kubectl apply -f -``)."""


def step(cmd: str, why: str = "", summary: bool = False, stdin_from: str = "") -> Step:
    return Step(tuple(cmd.split(" ")), why, summary, tuple(stdin_from.split(" ")) if stdin_from else ())


RUN = ("run", "printer", "--image=busybox", "--restart=Never", "--command", "--",
       "sh", "-c", "for i in 1 2 3; do echo line $i; done")

STEPS: tuple[Step, ...] = (
    step("create namespace demo"),
    step("create -f {dir}/ns.yaml"),
    step("create -f {dir}/pod.yaml"),
    step("create -f {dir}/bad.yaml"),
    step("delete -f {dir}/pod.yaml"),
    step("apply -f {dir}/pod.yaml"),
    step("apply -f {dir}/pod-v2.yaml"),
    step("apply -f {dir}/pod-v2.yaml"),
    step("get pod web -o jsonpath={.spec.containers[0].image},{.metadata.labels.tier}"),
    step("patch pod web -p {\"spec\":{\"zzz\":1}}",
         "upstream drops the unknown field (Warning, no change); the reference platform keeps unknown fields, "
         "so the patch is a change of the pod spec, which is forbidden"),
    step("explain pod", summary=True),
    step("explain pod.spec.containers", summary=True,
         why="upstream lists enum values (from Go +enum markers), which the generated schemas do not carry"),
    step("explain node.status.capacity", summary=True,
         why="upstream keeps the tab that indents a few lines of the Quantity description"),
    Step(RUN),
    step("wait --for=jsonpath={.status.phase}=Succeeded pod/printer --timeout=60s"),
    step("logs printer"),
    step("get pods",
         "the reference platform's Table adds a NODE column (server-side printing is the server's choice)"),
    step("delete pod printer"),
    step("delete -f {dir}/pod-v2.yaml"),
    step("get namespace from-file -o jsonpath={.status.phase}"),
    step("delete namespace demo from-file"),
    step("create deployment web --image=busybox"),
    step("delete deployment web"),
    step("run args-only --image=busybox --restart=Never -- echo hi",
         "without --command the words are args for the image's entrypoint; there are no images, so no process"),
    step("delete pod args-only"),
    step("get --raw /openapi/v2",
         "the reference platform's v2 document has the served kinds' definitions and no paths (kubectl reads "
         "only the definitions, to validate a kind: List)"),
    step("create token default",
         "TokenRequest (serviceaccounts/token) is not served by the reference platform"),
    # issue 28: what a workload is configured with, and a tenant's rights
    step("create configmap cfg --from-literal=a=1 --from-literal=b=2"),
    step("get configmap cfg -o jsonpath={.data.a},{.data.b}"),
    step("get configmap kube-root-ca.crt -o jsonpath={.metadata.name}"),
    step("create secret generic creds --from-literal=token=s3cret"),
    step("get secret creds -o jsonpath={.type},{.data.token}"),
    step("create serviceaccount trainer"),
    step("get serviceaccounts -o name"),
    step("auth can-i create pods"),
    step("auth can-i create pods --subresource=binding"),
    step("auth whoami -o jsonpath={.status.userInfo.groups}",
         "the admin identity's groups differ: kube-apiserver's admin is in kubeadm:cluster-admins or "
         "system:masters as the test cluster set it up; the reference platform's in system:masters"),
    step("delete configmap cfg"),
    step("delete secret creds"),
    step("delete serviceaccount trainer"),
    step("create -f {dir}/list.json"),
    step("get configmap one two -o name"),
    step("delete -f {dir}/list.json"),
    step("apply -f {dir}/two.yaml"),
    step("diff -f {dir}/two-v2.yaml", summary=True),
    step("apply -f {dir}/two-v2.yaml"),
    step("get configmap job-config -o jsonpath={.data.lr}"),
    step("delete -f {dir}/two.yaml"),
    Step(("create", "job", "hello", "--image=busybox", "--", "sh", "-c", "echo hello from a job")),
    step("wait --for=condition=complete job/hello --timeout=60s"),
    step("logs job/hello"),
    step("get job hello -o jsonpath={.status.succeeded}"),
    step("delete job hello"),
    step("create pdb web-pdb --selector=app=web --min-available=1"),
    step("get pdb web-pdb -o jsonpath={.spec.minAvailable}"),
    step("delete pdb web-pdb"),
    step("create configmap dry --from-literal=a=1 --dry-run=server"),
    step("get configmap dry"),
    # server-side apply: field owners, conflicts, forcing, dropping fields
    step("apply --server-side -f {dir}/ssa.yaml"),
    step("apply --server-side --field-manager=tuner -f {dir}/ssa-tuner.yaml"),
    step("apply --server-side --field-manager=tuner --force-conflicts -f {dir}/ssa-tuner.yaml"),
    step("get configmap ssa -o jsonpath={.metadata.managedFields[*].manager}"),
    step("apply --server-side -f {dir}/ssa-v2.yaml"),
    step("get configmap ssa -o jsonpath={.data},{.metadata.labels}"),
    step("patch configmap ssa -p {\"data\":{\"lr\":\"0.9\"}}"),
    step("apply --server-side -f {dir}/ssa-v2.yaml"),
    step("delete configmap ssa"),
    # a Deployment through its everyday life
    step("apply --server-side -f {dir}/deploy.yaml"),
    step("rollout status deployment/trainer --timeout=60s",
         "how many \"Waiting for ...\" lines kubectl prints before the rollout is done depends on timing"),
    step("scale deployment trainer --replicas=2"),
    step("wait --for=jsonpath={.status.availableReplicas}=2 deployment/trainer --timeout=60s"),
    step("rollout status deployment/trainer --timeout=60s"),
    step("apply --server-side -f {dir}/deploy.yaml"),
    step("get deployment trainer -o jsonpath={.spec.replicas}"),
    step("apply -f -", stdin_from="get deployment trainer -o yaml"),
    step("get configmap --watch --request-timeout=2s -o name"),
    step("delete deployment trainer"),
)

MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d+(\.\d+)?(s|m|h|d)(\d+s)?\b"), "<age>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uid>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"/(LIVE|MERGED)-\d+/"), r"/\1-<n>/"),  # kubectl diff's temporary folders
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \+0000"), "<time>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<time>"),  # a field manager's, in a conflict
    (re.compile(r"[ \t]+"), " "),
)


def mask(text: str) -> str:
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


@dataclass(frozen=True)
class Result:
    code: int
    out: str


@dataclass(frozen=True)
class Side:
    name: str
    kubeconfig: Path
    cache: Path

    def run(self, args: tuple[str, ...], files: Path, stdin: str | None = None) -> Result:
        argv = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache),
                *(a.replace("{dir}", str(files)) for a in args)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}))
        return Result(proc.returncode, (proc.stdout + proc.stderr).replace(str(files), "DIR"))

    def run_step(self, s: Step, files: Path) -> Result:
        """Run a step; one fed by another command first runs that one and pipes its standard output in."""
        if not s.stdin_from:
            return self.run(s.args, files)
        argv = [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *s.stdin_from]
        source = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        return self.run(s.args, files, stdin=source.stdout)


CELL_LINE_CHARS = 240
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def cell(result: Result, summary: bool) -> str:
    if summary:
        return f"exit {result.code}, {len(result.out.splitlines())} lines"
    text = JWT.sub("<a service-account token>", result.out.strip()) or "(no output)"
    lines = [line if len(line) <= CELL_LINE_CHARS else line[:CELL_LINE_CHARS] + f"... ({len(line)} chars)"
             for line in text.splitlines()]
    shown = "<br>".join(line.replace("|", "\\|") for line in lines[:4])
    if len(lines) > 4:
        shown += f"<br>... ({len(lines)} lines)"
    return f"exit {result.code}: `{shown}`" if "`" not in shown else f"exit {result.code}: {shown}"


def difference(step: Step, ref: Result, real: Result) -> str:
    a, b = mask(ref.out).splitlines(), mask(real.out).splitlines()
    if ref.code == real.code and a == b:
        return "same"
    changed = [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    out = f"**differs** ({len(changed)} lines)" if ref.code == real.code else \
        f"**differs** (exit {ref.code} vs {real.code})"
    if step.why:
        out += f": {step.why}"
    return out


def table(rows: list[tuple[Step, Result, Result]], versions: tuple[str, str]) -> str:
    head = ["| # | `kubectl ...` | reference platform | kube-apiserver " + versions[1] + " | difference |",
            "|---|---|---|---|---|"]
    body = []
    for i, (s, ref, real) in enumerate(rows, 1):
        cmd = (shlex.join(s.stdin_from) + " | kubectl " if s.stdin_from else "") + shlex.join(s.args)
        cmd = cmd.replace("|", "\\|")
        body.append(f"| {i} | `{cmd}` | {cell(ref, s.summary)} | {cell(real, s.summary)} | "
                    f"{difference(s, ref, real)} |")
    same = sum(1 for s, a, b in rows if difference(s, a, b) == "same")
    return "\n".join([*head, *body, "", f"{same} of {len(rows)} commands print the same (masked: ages, uids, "
                                        "ports); kubectl " + versions[0] + "."])


def start_reference(work: Path) -> Cluster:
    c = Cluster(ClusterSpec(work / "reference", nodes=1, heartbeat=0.5,
                            controllers=("scheduler", "job", "deployment", "replicaset", "disruption", "serviceaccount",
                                         "root-ca-cert-publisher")))
    c.start()
    return c


def start_real(work: Path, bin_dir: Path) -> tuple[RealCluster, RefAgents]:
    cluster = RealCluster(RealClusterSpec(bin_dir=bin_dir, work_dir=work / "real",
                                          extra_users=(node_user(AGENT),)))
    cluster.start()
    agents = RefAgents(cluster, work / "real" / "agents")
    try:
        agents.start(AGENT)
    except BaseException:
        agents.close()
        cluster.stop()
        raise
    return cluster, agents


def wait_ok(side: Side, args: tuple[str, ...], what: str, timeout: float = 60) -> None:
    last: list[Result] = []

    def ok() -> bool:
        last[:] = [side.run(args, Path("."))]
        return last[0].code == 0
    try:
        wait_until(ok, timeout, what, interval=0.5)
    except Exception as exc:
        raise SystemExit(f"{side.name}: {what} failed: {last[0].out if last else exc}") from None


Row = tuple[Step, Result, Result]


def collect(work: Path, bin_dir: Path) -> tuple[list[Row], tuple[str, str]]:
    """Start both clusters under ``work``, run :data:`STEPS` on each, stop them; the rows and
    (kubectl version, Kubernetes version)."""
    files = work / "manifests"
    files.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (files / name).write_text(text)
    ref_cluster = real = agents = None
    try:
        ref_cluster = start_reference(work)
        real, agents = start_real(work, bin_dir)
        sides = (Side("reference", ref_cluster.kubeconfig, work / "cache-ref"),
                 Side("real", real.admin_kubeconfig, work / "cache-real"))
        for side in sides:  # the clusters are up: a node Ready, the default service account made
            wait_ok(side, ("wait", "--for=condition=Ready", "node", "--all", "--timeout=5s"), "a Ready node")
        wait_ok(sides[1], ("get", "serviceaccount", "default"), "the default service account")
        rows = [(s, sides[0].run_step(s, files), sides[1].run_step(s, files)) for s in STEPS]
        kubectl = subprocess.run([KUBECTL, "version", "--client"], capture_output=True, text=True)
        return rows, (kubectl.stdout.splitlines()[0].split(": ")[-1], real.build.kubernetes)
    finally:
        if agents is not None:
            agents.close()
        if real is not None:
            real.stop()
        if ref_cluster is not None:
            ref_cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.realk8s.kubectl_table", description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed at the end)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    args = p.parse_args(argv)
    outcome = ensure_built()
    if outcome.bin_dir is None:
        print(f"error: no real control plane: {outcome.skip_reason or outcome.error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubectl-table-") as tmp:
        rows, versions = collect(args.work or Path(tmp), outcome.bin_dir)
    text = table(rows, versions)
    print(text)
    print(f"\n(ran in {time.monotonic() - started:.0f} s: python -m tests.realk8s.kubectl_table)", file=sys.stderr)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
