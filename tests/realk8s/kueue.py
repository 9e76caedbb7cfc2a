"""Kueue's manager (``sigs.k8s.io/kueue``, built by ``build_kueue.sh``) on a real control plane of these tests.

What it takes, as Kueue's own kustomize manifests set it up, with loopback in place of Services (there is no
kube-proxy, and kube-apiserver reaches a webhook by URL only):

- the CRDs of the release (``config/components/crd/bases``), the five that Kueue converts between
  v1beta1 and v1beta2 with their conversion webhook (``/convert``) as the release's kustomize patch adds it;
- the release's webhook configurations (``config/components/webhook/manifests.yaml``) for Kueue's own objects
  and the two integrations the drills use (``batch/job``, ``pod``), with ``clientConfig.url`` on
  127.0.0.1; the pod webhook only sees namespaces labelled ``kueue-managed=true``, so pods elsewhere never
  depend on Kueue being up;
- Kueue's internal cert management on, as shipped, fed a secret made here (a ``kueue-ca`` CA and a serving
  cert for ``kueue-webhook-service.kueue-system.svc`` that also names 127.0.0.1, valid for a year so the
  rotator keeps it), and the same files in its cert folder as the kubelet's secret volume would hold them:
  Kueue injects the CA into every webhook configuration and CRD itself;
- the manager as a process (no Deployment: there is no container runtime) with the admin kubeconfig and a
  Configuration file (leader election off, ``waitForPodsReady`` so a gang that does not become ready in time
  is evicted whole).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.realk8s.cluster import RealCluster, RealClusterError
from tests.realk8s.test_control_plane import kubectl

#: Kueue's own objects and the two integrations the drills use.
WEBHOOK_PATHS = ("/mutate-batch-v1-job", "/validate-batch-v1-job", "/mutate--v1-pod", "/validate--v1-pod",
                 "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
                 "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor",
                 "/validate-kueue-x-k8s-io-v1beta2-resourceflavor", "/mutate-kueue-x-k8s-io-v1beta2-workload",
                 "/validate-kueue-x-k8s-io-v1beta2-workload", "/validate-kueue-x-k8s-io-v1beta2-cohort")
MANAGED_LABEL = "kueue-managed"
"""Namespaces whose pods Kueue's pod webhook sees (``kueue-managed=true``)."""
START_TIMEOUT_S = 90.0
NAMESPACE = "kueue-system"
SERVICE_DNS = f"kueue-webhook-service.{NAMESPACE}.svc"
SECRET = "kueue-webhook-server-cert"
CONVERTED_CRDS = ("localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters")
"""The CRDs Kueue's cert rotator injects its CA into as conversion webhooks (pkg/util/cert in the release)."""


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    """PKCS#1 (``RSA PRIVATE KEY``): the only form the rotator parses."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def webhook_pki() -> dict[str, bytes]:
    """``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` as Kueue's cert rotator keeps them in its secret: a CA
    named ``kueue-ca`` and a serving cert for the webhook Service's DNS name and 127.0.0.1, valid for a year
    (the rotator renews what expires within 90 days)."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=365)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kueue"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "kueue-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=True, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName("kueue-ca")]), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVICE_DNS)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVICE_DNS),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": _pem_key(ca_key),
            "tls.crt": cert.public_bytes(serialization.Encoding.PEM), "tls.key": _pem_key(key)}


def with_conversion_webhook(crd: dict[str, Any], port: int, ca_pem: bytes) -> dict[str, Any]:
    """The CRD with Kueue's conversion webhook on 127.0.0.1 (what the release's kustomize patch adds)."""
    crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": base64.b64encode(ca_pem).decode()}}}
    return crd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def webhook_configurations(manifests: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, kept to :data:`WEBHOOK_PATHS`, pointed at 127.0.0.1:port."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc or doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path")
            if path not in WEBHOOK_PATHS:
                continue
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca_pem).decode()}
            if path.endswith("--v1-pod"):
                hook["namespaceSelector"] = {"matchLabels": {MANAGED_LABEL: "true"}}
            hooks.append(hook)
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}  # the names Kueue's rotator injects into
        doc["webhooks"] = hooks
        out.append(doc)
    return out


@dataclass
class KueueManager:
    """Kueue's manager against ``cluster``; :meth:`start` installs and starts it, :meth:`stop` ends it."""

    kueue_dir: Path
    cluster: RealCluster
    work_dir: Path
    pods_ready_timeout_s: int = 30
    client_qps: float | None = None
    """The manager's ``clientConnection.qps`` towards kube-apiserver (None: Kueue's default, 20, burst 30)."""
    client_burst: int | None = None
    port: int = field(default=0, init=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def log_path(self) -> Path:
        return self.work_dir / "kueue.log"

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        return kubectl(self.cluster.admin_kubeconfig, *args, stdin=stdin).stdout

    def start(self) -> KueueManager:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        pki = webhook_pki()
        for path in sorted((self.kueue_dir / "crds").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            if crd["spec"]["names"]["plural"] in CONVERTED_CRDS:
                crd = with_conversion_webhook(crd, self.port, pki["ca.crt"])
            self._kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(crd))
        self._wait_established()
        self._kubectl("create", "namespace", NAMESPACE)
        self._kubectl("create", "secret", "generic", SECRET, "-n", NAMESPACE,
                      *[f"--from-file={name}={self._write(name, data, self.work_dir / 'secret')}"
                        for name, data in pki.items()])
        for doc in webhook_configurations((self.kueue_dir / "webhook" / "manifests.yaml").read_text(), self.port,
                                          pki["ca.crt"]):
            self._kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc))
        certs = self.work_dir / "certs"  # what the kubelet's secret volume would hold: the rotator waits for it
        for name in ("ca.crt", "tls.crt", "tls.key"):
            self._write(name, pki[name], certs)
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True},
            "waitForPodsReady": {"timeout": f"{self.pods_ready_timeout_s}s", "blockAdmission": False},
            "integrations": {"frameworks": ["batch/job", "pod"]},
        }
        if self.client_qps is not None or self.client_burst is not None:
            config["clientConnection"] = {k: v for k, v in (("qps", self.client_qps), ("burst", self.client_burst))
                                          if v is not None}
        config_file = self.work_dir / "kueue-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {"KUBECONFIG": str(self.cluster.admin_kubeconfig), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen([str(self.kueue_dir / "bin" / "kueue"), f"--config={config_file}",
                                      # the on-demand visibility API is an aggregated API server that needs
                                      # in-cluster config for delegated authentication: not served here
                                      "--feature-gates=VisibilityOnDemand=false"],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        try:
            self._wait_serving()
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _write(name: str, data: bytes, directory: Path) -> Path:
        path = directory / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def _wait_established(self) -> None:
        names = [p.stem.split("_", 1)[1] + "." + p.stem.split("_", 1)[0]
                 for p in sorted((self.kueue_dir / "crds").glob("*.yaml"))]
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      *[f"crd/{n}" for n in names])

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RealClusterError(f"kueue exited with code {self.proc.returncode}; see {self.log_path}:\n"
                                       + self.log_path.read_text(errors="replace")[-3000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise RealClusterError(f"kueue's webhook server did not listen on 127.0.0.1:{self.port} within "
                                       f"{START_TIMEOUT_S:.0f}s; see {self.log_path}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        if self._log is not None:
            self._log.close()
            self._log = None
