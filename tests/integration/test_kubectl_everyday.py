"""The everyday kubectl commands of issue 28, run by the machine's kubectl against a started reference cluster:
ConfigMaps, Secrets and ServiceAccounts as ``kubectl create`` makes them, each namespace's ``default``
ServiceAccount and ``kube-root-ca.crt``, ``kubectl auth can-i`` (and ``--list``) answered by the gates that
decide real requests, ``kubectl auth whoami``; bad input refused with upstream's field paths, and no Secret
value in an error.  Side by side with kube-apiserver: ``tests/realk8s/kubectl_table.py``.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import api_client

pytestmark = [pytest.mark.integration, pytest.mark.kubectl]

KUBECTL = shutil.which("kubectl")
if KUBECTL is None:
    pytest.skip("kubectl is not installed (.ci/run installs it)", allow_module_level=True)

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
SECRET_VALUE = "s3cr3t-never-printed"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path_factory.mktemp("kubectl-everyday"), nodes=1, heartbeat=0.5,
                            controllers=("scheduler", "job", "disruption", "serviceaccount",
                                         "root-ca-cert-publisher")))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _kubectl(kubeconfig: Path, cache: Path) -> Kubectl:
    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, input=stdin)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc
    return run


@pytest.fixture(scope="module")
def kubectl(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return _kubectl(cluster.kubeconfig, tmp_path_factory.mktemp("cache-admin"))


@pytest.fixture(scope="module")
def tenant(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return _kubectl(cluster.tenant_kubeconfig("tenant-a"), tmp_path_factory.mktemp("cache-tenant"))


def test_configmap_from_literals_and_a_file(kubectl: Kubectl, tmp_path: Path) -> None:
    (tmp_path / "app.properties").write_text("lr=0.1\nbatch=32\n")
    kubectl("create", "configmap", "train-config", "--from-literal=epochs=3",
            f"--from-file={tmp_path / 'app.properties'}")
    got = json.loads(kubectl("get", "configmap", "train-config", "-o", "json").stdout)
    assert got["data"] == {"epochs": "3", "app.properties": "lr=0.1\nbatch=32\n"}
    row = kubectl("get", "cm", "train-config").stdout.splitlines()
    assert row[0].split() == ["NAME", "DATA", "AGE"] and row[1].split()[:2] == ["train-config", "2"]
    kubectl("delete", "configmap", "train-config")


def test_secret_generic_is_stored_base64_and_never_echoed(kubectl: Kubectl, cluster: Cluster) -> None:
    out = kubectl("create", "secret", "generic", "registry", f"--from-literal=token={SECRET_VALUE}")
    assert SECRET_VALUE not in out.stdout + out.stderr
    got = json.loads(kubectl("get", "secret", "registry", "-o", "json").stdout)
    assert got["type"] == "Opaque" and base64.b64decode(got["data"]["token"]).decode() == SECRET_VALUE
    table = kubectl("get", "secrets").stdout
    assert table.splitlines()[0].split() == ["NAME", "TYPE", "DATA", "AGE"] and SECRET_VALUE not in table
    # stringData is write-only: folded into data, never stored as such
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "from-strings"}, "stringData": {"password": SECRET_VALUE}}))
    stored = json.loads(kubectl("get", "secret", "from-strings", "-o", "json").stdout)
    assert "stringData" not in stored and base64.b64decode(stored["data"]["password"]).decode() == SECRET_VALUE
    audit = (cluster.data_dir / "audit.log").read_text()
    assert '"resource":"secrets"' in audit.replace(" ", "") and SECRET_VALUE not in audit


def test_bad_secrets_are_refused_naming_the_field_not_the_value(kubectl: Kubectl) -> None:
    tls = kubectl("create", "-f", "-", check=False, stdin=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "half-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": SECRET_VALUE}}))
    assert tls.returncode != 0 and "data[tls.key]: Required value" in tls.stderr
    assert SECRET_VALUE not in tls.stderr
    big = kubectl("create", "-f", "-", check=False, stdin=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "too-big"},
        "data": {"blob": base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()}}))
    assert big.returncode != 0 and "data: Too long: may not be more than 1048576 bytes" in big.stderr
    key = kubectl("create", "-f", "-", check=False, stdin=json.dumps({  # `create configmap` checks keys itself
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad-key"}, "data": {"no/slash": "1"}}))
    assert key.returncode != 0 and 'data[no/slash]: Invalid value: "no/slash": a valid config key' in key.stderr


def test_an_immutable_configmap_keeps_its_data(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "frozen"}, "immutable": True, "data": {"a": "1"}}))
    out = kubectl("patch", "configmap", "frozen", "-p", '{"data": {"a": "2"}}', check=False)
    assert out.returncode != 0 and "data: Forbidden: field is immutable when `immutable` is set" in out.stderr
    assert json.loads(kubectl("get", "cm", "frozen", "-o", "json").stdout)["data"] == {"a": "1"}


def test_every_namespace_gets_its_default_service_account_and_root_ca(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("create", "namespace", "team-x")
    v1 = client.CoreV1Api(api_client(cluster))
    wait_until(lambda: any(s.metadata.name == "default" for s in v1.list_namespaced_service_account("team-x").items),
               20, "the default ServiceAccount of team-x")
    assert kubectl("get", "serviceaccounts", "-n", "team-x", "-o", "name").stdout.split() == ["serviceaccount/default"]
    wait_until(lambda: any(c.metadata.name == "kube-root-ca.crt"
                           for c in v1.list_namespaced_config_map("team-x").items), 20, "kube-root-ca.crt")
    ca = json.loads(kubectl("get", "cm", "kube-root-ca.crt", "-n", "team-x", "-o", "json").stdout)["data"]["ca.crt"]
    assert ca == cluster.ca_file.read_text()
    kubectl("create", "serviceaccount", "trainer", "-n", "team-x")
    assert "serviceaccount/trainer" in kubectl("get", "sa", "-n", "team-x", "-o", "name").stdout


def test_auth_can_i_tells_a_tenant_the_truth(tenant: Kubectl, kubectl: Kubectl) -> None:
    assert kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"
    yes = tenant("auth", "can-i", "create", "pods")
    assert yes.returncode == 0 and yes.stdout.strip() == "yes"
    for question in (["create", "pods", "--subresource=binding"], ["create", "pods", "-n", "firedrill-neighbour"],
                     ["patch", "nodes"], ["update", "resourcequotas"], ["list", "pods", "--all-namespaces"]):
        no = tenant("auth", "can-i", *question, check=False)
        assert no.returncode == 1 and no.stdout.strip().startswith("no"), (question, no.stdout, no.stderr)
    # what it was told holds: the refusal it predicted is what the server does
    refused = tenant("create", "configmap", "x", "-n", "firedrill-neighbour", "--from-literal=a=1", check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr
    listed = tenant("auth", "can-i", "--list").stdout
    assert "configmaps" in listed and "pods/binding" not in listed


def test_auth_whoami(tenant: Kubectl) -> None:
    out = tenant("auth", "whoami", "-o", "json")
    info = json.loads(out.stdout)["status"]["userInfo"]
    assert info["username"] == "tenant-a" and "system:authenticated" in info["groups"]


def _configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_a_list_as_kubectl_writes_it_is_validated_created_and_deleted(kubectl: Kubectl, tmp_path: Path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        _configmap("one", a="1"), _configmap("two", b="2")]}))
    out = kubectl("create", "-f", str(listed))
    assert out.stdout.split() == ["configmap/one", "created", "configmap/two", "created"]
    exported = kubectl("get", "configmap", "one", "two", "-o", "json").stdout  # kubectl writes a List
    assert json.loads(exported)["kind"] == "List"
    kubectl("delete", "-f", str(listed))
    # kubectl validates a List's items itself, against /openapi/v2 (asked for as protobuf)
    bad = tmp_path / "bad-list.json"
    bad.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {**_configmap("three", c="3"), "dataa": {}}]}))
    refused = kubectl("create", "-f", str(bad), check=False)
    assert refused.returncode != 0 and 'unknown field "dataa"' in refused.stderr, refused.stderr
    assert "three" not in kubectl("get", "configmaps", "-o", "name").stdout


def test_a_two_document_file_applies_and_reapplies(kubectl: Kubectl, tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: job-config}\ndata: {lr: '0.1'}\n---\n"
                    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: job-runner}\n")
    assert kubectl("apply", "-f", str(both)).stdout.split() == [
        "configmap/job-config", "created", "serviceaccount/job-runner", "created"]
    both.write_text(both.read_text().replace("'0.1'", "'0.2'"))
    assert kubectl("apply", "-f", str(both)).stdout.split() == [
        "configmap/job-config", "configured", "serviceaccount/job-runner", "unchanged"]
    assert json.loads(kubectl("get", "cm", "job-config", "-o", "json").stdout)["data"] == {"lr": "0.2"}
    kubectl("delete", "-f", str(both))


def test_diff_and_server_dry_runs_change_nothing(kubectl: Kubectl, tmp_path: Path, cluster: Cluster) -> None:
    cm = tmp_path / "cm.yaml"
    cm.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry}\ndata: {a: '1'}\n")
    kubectl("apply", "-f", str(cm))
    cm.write_text(cm.read_text().replace("'1'", "'2'"))
    diff = kubectl("diff", "-f", str(cm), check=False)
    assert diff.returncode == 1 and '-  a: "1"' in diff.stdout and '+  a: "2"' in diff.stdout
    assert json.loads(kubectl("get", "cm", "dry", "-o", "json").stdout)["data"] == {"a": "1"}, \
        "kubectl diff sends dryRun=All: the live object must not change"
    assert "created (server dry run)" in kubectl("create", "configmap", "ghost", "--from-literal=a=1",
                                                  "--dry-run=server").stdout
    assert kubectl("delete", "configmap", "dry", "--dry-run=server").returncode == 0
    names = kubectl("get", "configmaps", "-o", "name").stdout.split()
    assert "configmap/dry" in names and "configmap/ghost" not in names
    v1 = client.CoreV1Api(api_client(cluster))
    with pytest.raises(client.exceptions.ApiException) as refused:
        v1.delete_namespaced_config_map("dry", "default", dry_run="Some")
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["message"] == 'dryRun: Unsupported value: "Some": supported values: "All"'
    kubectl("delete", "-f", str(cm))


def test_a_job_runs_to_complete_and_an_indexed_job_replaces_a_lost_pod_after_the_back_off(
        kubectl: Kubectl, tmp_path: Path, cluster: Cluster) -> None:
    kubectl("create", "job", "hello", "--image=busybox", "--", "sh", "-c", "echo hello from a job")
    kubectl("wait", "--for=condition=complete", "job/hello", "--timeout=60s")
    assert kubectl("logs", "job/hello").stdout == "hello from a job\n"
    row = kubectl("get", "job", "hello").stdout.splitlines()
    assert row[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert row[1].split()[:3] == ["hello", "Complete", "1/1"]

    indexed = tmp_path / "indexed.yaml"
    indexed.write_text("""\
apiVersion: batch/v1
kind: Job
metadata: {name: ranks}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  backoffLimitPerIndex: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "echo rank $JOB_COMPLETION_INDEX; sleep 600"]
""")
    kubectl("apply", "-f", str(indexed))
    v1 = client.CoreV1Api(api_client(cluster))

    def ranks() -> dict[str, str]:
        return {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p.metadata.name
                for p in v1.list_namespaced_pod("default", label_selector="batch.kubernetes.io/job-name=ranks").items
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp}
    wait_until(lambda: len(ranks()) == 2, 30, "both ranks running")
    first = ranks()
    assert kubectl("logs", first["1"]).stdout == "rank 1\n"
    asked = datetime.now(timezone.utc)
    kubectl("delete", "pod", first["1"], "--wait=false")
    wait_until(lambda: ranks().get("1") not in (None, first["1"]), 40, "index 1 replaced")
    replaced = v1.read_namespaced_pod(ranks()["1"], "default")
    assert replaced.metadata.annotations["batch.kubernetes.io/job-index-failure-count"] == "1"
    assert replaced.spec.hostname == "ranks-1" and replaced.metadata.owner_references[0].kind == "Job"
    status = json.loads(kubectl("get", "job", "ranks", "-o", "json").stdout)["status"]
    assert status["failed"] == 1 and status["active"] == 2
    # upstream's pod-failure back-off: the first failure of an index waits 10 s (timestamps have 1 s resolution)
    waited = (replaced.metadata.creation_timestamp - asked).total_seconds()
    assert 9 <= waited <= 14, waited
    kubectl("delete", "job", "ranks")
    wait_until(lambda: not v1.list_namespaced_pod("default", label_selector="batch.kubernetes.io/job-name=ranks").items,
               30, "the Job's pods to be collected")


def test_drain_and_evictions_honour_a_pod_disruption_budget(kubectl: Kubectl, cluster: Cluster) -> None:
    for name in ("guarded-a", "guarded-b"):
        kubectl("run", name, "--image=busybox", "--restart=Never", "--labels=app=guarded", "--command", "--",
                "sleep", "600")
    kubectl("wait", "--for=condition=Ready", "pod/guarded-a", "pod/guarded-b", "--timeout=60s")
    kubectl("create", "pdb", "guarded", "--selector=app=guarded", "--min-available=2")
    policy = client.PolicyV1Api(api_client(cluster))

    def allowed() -> int | None:
        status = policy.read_namespaced_pod_disruption_budget("guarded", "default").status
        return status.disruptions_allowed if status and status.observed_generation == 1 else None
    wait_until(lambda: allowed() == 0, 20, "the budget's status (2 healthy of 2 wanted: none may go)")
    node = json.loads(kubectl("get", "pod", "guarded-a", "-o", "json").stdout)["spec"]["nodeName"]
    drain = kubectl("drain", node, "--pod-selector=app=guarded", "--force", "--timeout=6s", check=False)
    assert drain.returncode != 0 and "Cannot evict pod as it would violate the pod's disruption budget" in drain.stderr
    kubectl("uncordon", node)
    assert sorted(kubectl("get", "pods", "-l", "app=guarded", "-o", "name").stdout.split()) == [
        "pod/guarded-a", "pod/guarded-b"]

    kubectl("patch", "pdb", "guarded", "--type=merge", "-p", '{"spec": {"minAvailable": 1}}')
    wait_until(lambda: policy.read_namespaced_pod_disruption_budget("guarded", "default").status.disruptions_allowed
               == 1, 20, "one disruption allowed")
    v1 = client.CoreV1Api(api_client(cluster))
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded-a", namespace="default"))
    v1.create_namespaced_pod_eviction("guarded-a", "default", eviction)
    second = client.V1Eviction(metadata=client.V1ObjectMeta(name="guarded-b", namespace="default"))
    with pytest.raises(client.exceptions.ApiException) as refused:
        v1.create_namespaced_pod_eviction("guarded-b", "default", second)
    assert refused.value.status == 429
    kubectl("delete", "pod", "guarded-b", "--wait=false")
    kubectl("delete", "pdb", "guarded")


def test_a_pod_reads_config_maps_and_secrets_as_env_and_files(kubectl: Kubectl, tmp_path: Path) -> None:
    kubectl("create", "configmap", "train-env", "--from-literal=LR=0.1", "--from-literal=EPOCHS=3")
    kubectl("create", "secret", "generic", "train-creds", f"--from-literal=token={SECRET_VALUE}")
    pod = tmp_path / "reader.yaml"
    pod.write_text(f"""\
apiVersion: v1
kind: Pod
metadata: {{name: reader}}
spec:
  restartPolicy: Never
  volumes:
  - {{name: creds, secret: {{secretName: train-creds}}}}
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo "$CFG_LR $CFG_EPOCHS $TOKEN $MISSING"; cat "$1"', sh, /etc/creds/token]
    envFrom: [{{configMapRef: {{name: train-env}}, prefix: CFG_}}]
    env:
    - {{name: TOKEN, valueFrom: {{secretKeyRef: {{name: train-creds, key: token}}}}}}
    - {{name: MISSING, valueFrom: {{configMapKeyRef: {{name: nowhere, key: k, optional: true}}}}}}
    volumeMounts: [{{name: creds, mountPath: /etc/creds}}]
""")
    kubectl("apply", "-f", str(pod))
    kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/reader", "--timeout=60s")
    assert kubectl("logs", "reader").stdout.rstrip("\n") == f"0.1 3 {SECRET_VALUE} \n{SECRET_VALUE}"
    kubectl("delete", "pod/reader", "configmap/train-env", "secret/train-creds")


SSA_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: ssa
  labels: {team: ml}
data: {lr: "0.1", epochs: "3"}
"""


def _managers(kubectl: Kubectl, name: str) -> dict[tuple[str, str], dict[str, object]]:
    got = json.loads(kubectl("get", "configmap", name, "-o", "json", "--show-managed-fields").stdout)
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in got["metadata"].get("managedFields", [])}


def test_server_side_apply_owns_fields_refuses_conflicts_and_removes_what_it_dropped(
        kubectl: Kubectl, tmp_path: Path) -> None:
    cfg = tmp_path / "ssa.yaml"
    cfg.write_text(SSA_CONFIG)
    out = kubectl("apply", "--server-side", "-f", str(cfg))
    assert "configmap/ssa serverside-applied" in out.stdout
    owned = _managers(kubectl, "ssa")[("kubectl", "Apply")]
    assert owned == {"f:data": {".": {}, "f:epochs": {}, "f:lr": {}},
                     "f:metadata": {"f:labels": {".": {}, "f:team": {}}}}

    # Another manager setting a field to a different value is refused, naming the field and its owner.
    other = tmp_path / "other.yaml"
    other.write_text(SSA_CONFIG.replace('lr: "0.1"', 'lr: "0.5"').replace(', epochs: "3"', "")
                     .replace("  labels: {team: ml}\n", ""))
    refused = kubectl("apply", "--server-side", "--field-manager=tuner", "-f", str(other), check=False)
    assert refused.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.lr' in refused.stderr
    assert json.loads(kubectl("get", "configmap", "ssa", "-o", "json").stdout)["data"]["lr"] == "0.1"
    # The same value is shared ownership, not a conflict; --force-conflicts takes the field over.
    kubectl("apply", "--server-side", "--field-manager=tuner", "--force-conflicts", "-f", str(other))
    managers = _managers(kubectl, "ssa")
    assert managers[("tuner", "Apply")]["f:data"] == {".": {}, "f:lr": {}}
    assert "f:lr" not in managers[("kubectl", "Apply")]["f:data"]

    # kubectl stops sending epochs and the label: the fields only it held go; lr, which tuner holds, stays.
    cfg.write_text('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {lr: "0.5"}\n')
    kubectl("apply", "--server-side", "-f", str(cfg))
    got = json.loads(kubectl("get", "configmap", "ssa", "-o", "json").stdout)
    assert got["data"] == {"lr": "0.5"} and "team" not in (got["metadata"].get("labels") or {})

    # An Update (kubectl edit, patch, replace...) takes over what it changes; the next apply conflicts with it.
    kubectl("patch", "configmap", "ssa", "-p", '{"data":{"lr":"0.9"}}')
    assert _managers(kubectl, "ssa")[("kubectl-patch", "Update")] == {"f:data": {"f:lr": {}}}
    refused = kubectl("apply", "--server-side", "-f", str(cfg), check=False)
    assert 'conflict with "kubectl-patch" using v1: .data.lr' in refused.stderr
    kubectl("delete", "configmap", "ssa")


def test_apply_patches_are_checked_before_anything_changes(cluster: Cluster) -> None:
    url = f"{cluster.url}/api/v1/namespaces/default/configmaps/ssa-bad"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-bad"}, "data": {"a": "1"}}
    with httpx.Client(verify=ssl.create_default_context(cafile=str(cluster.ca_file)), headers={"Authorization": f"Bearer {cluster.token}"}) as http:
        def apply(payload: object, content_type: str = "application/apply-patch+yaml",
                  **params: str) -> httpx.Response:
            return http.patch(url, params=params, content=json.dumps(payload),
                              headers={"Content-Type": content_type})
        missing = apply(body)
        assert missing.status_code == 422 and "fieldManager: Required value" in missing.json()["message"]
        owned = dict(body, metadata={"name": "ssa-bad", "managedFields": [{"manager": "x"}]})
        assert apply(owned, fieldManager="t").json()["message"] == "metadata.managedFields must be nil"
        assert apply({"metadata": {"name": "ssa-bad"}}, fieldManager="t").status_code == 400
        assert apply(dict(body, kind="Secret"), fieldManager="t").status_code == 400
        bad_yaml = http.patch(url, params={"fieldManager": "t"}, content=b"data: [unclosed",
                              headers={"Content-Type": "application/apply-patch+yaml"})
        assert bad_yaml.status_code == 400 and "error decoding YAML" in bad_yaml.json()["message"]
        forced = apply({"data": {"a": "2"}}, "application/merge-patch+json", force="true")
        assert forced.status_code == 422 and "force: Forbidden" in forced.json()["message"]
        assert http.get(url).status_code == 404
        created = apply(body, fieldManager="t")
        assert created.status_code == 201
        assert [e["manager"] for e in created.json()["metadata"]["managedFields"]] == ["t"]
        assert apply(body, fieldManager="t").status_code == 200
        assert http.delete(url).status_code == 200
