"""Start and stop an upstream Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built by ``tests/realk8s/build.sh``.

Everything a run needs lives in one work directory (a temp dir in tests)::

    WORK/etcd-data/          etcd's data directory
    WORK/pki/                CA, serving certs (one per component), service-account key pair
    WORK/tokens.csv          kube-apiserver's --token-auth-file (mode 0600)
    WORK/*.kubeconfig        admin, controller-manager, scheduler (mode 0600)
    WORK/logs/<process>.log  each process's stdout and stderr

Nothing here is imported by ``drills`` or ``refplatform``: this is a test fixture that
stands up the real thing those are drilled against.
"""

from __future__ import annotations

import datetime
import enum
import ipaddress
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"
STAMP_FILE = ".built"
#: Not a route: Services get cluster IPs from this range as API data only (no kube-proxy runs).
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LOG_TAIL_LINES = 40


class RealClusterError(Exception):
    """The real control plane could not be built, started or stopped; the message names the process."""


class Component(enum.Enum):
    """The processes of the control plane, in start order."""

    ETCD = "etcd"
    """etcd, the store; plain HTTP on loopback."""
    APISERVER = "kube-apiserver"
    """kube-apiserver, TLS on a free loopback port, static tokens, Node and RBAC authorization."""
    CONTROLLER_MANAGER = "kube-controller-manager"
    """kube-controller-manager: node lifecycle, taint eviction, job, garbage collector and the rest."""
    SCHEDULER = "kube-scheduler"
    """kube-scheduler, with the native gang scheduling plugin where the version has one."""


@dataclass(frozen=True)
class BuildInfo:
    """What ``build.sh`` wrote into ``bin/.built``."""

    kubernetes: str
    etcd: str

    @property
    def minor(self) -> str:
        """``"1.37"`` for ``v1.37.2``."""
        return ".".join(self.kubernetes.lstrip("v").split(".")[:2])


@dataclass(frozen=True)
class NativeGangScheduling:
    """How one Kubernetes minor version serves native gang scheduling (KEP-4671 Workload and PodGroup)."""

    feature_gates: tuple[str, ...]
    """Gates turned on in all three components."""
    api_version: str
    """The group/version serving ``workloads`` and ``podgroups``; off by default, so named in --runtime-config."""


#: Read from each version's own source (pkg/features/kube_features.go,
#: pkg/registry/scheduling/rest/storage_scheduling.go, pkg/scheduler/apis/config/v1/default_plugins.go).
#: 1.36: Workload/PodGroup at v1alpha2 behind GenericWorkload; the scheduler's GangScheduling plugin behind
#: its own gate. 1.37: Workload/PodGroup at v1beta1 (GenericWorkload is beta, still off by default), the
#: GangScheduling gate is gone and GenericWorkload alone enables the plugin.
NATIVE_GANG_SCHEDULING: dict[str, NativeGangScheduling] = {
    "1.36": NativeGangScheduling(("GenericWorkload", "GangScheduling"), "scheduling.k8s.io/v1alpha2"),
    "1.37": NativeGangScheduling(("GenericWorkload",), "scheduling.k8s.io/v1beta1"),
}


@dataclass(frozen=True)
class StaticUser:
    """A user in the API server's static token file; its token is generated at start."""

    name: str
    groups: tuple[str, ...] = ()


ADMIN = StaticUser("firedrill-admin", ("system:masters",))
CONTROLLER_MANAGER_USER = StaticUser("system:kube-controller-manager")
SCHEDULER_USER = StaticUser("system:kube-scheduler")


@dataclass(frozen=True)
class RealClusterSpec:
    """What to start and with which tunables; durations in seconds."""

    bin_dir: Path
    work_dir: Path
    node_monitor_grace_period: float = 50.0
    """kube-controller-manager --node-monitor-grace-period (upstream default 50 s)."""
    node_monitor_period: float = 5.0
    """kube-controller-manager --node-monitor-period (upstream default 5 s)."""
    default_unreachable_toleration_seconds: int = 300
    """kube-apiserver --default-unreachable-toleration-seconds (upstream default 300)."""
    default_not_ready_toleration_seconds: int = 300
    """kube-apiserver --default-not-ready-toleration-seconds (upstream default 300)."""
    native_gang_scheduling: bool = True
    """Turn on the version's Workload/PodGroup API and gang scheduling plugin (see NATIVE_GANG_SCHEDULING)."""
    scheduler_gang_scheduling: bool = True
    """With ``native_gang_scheduling``: False starts kube-scheduler with the gates off (``GenericWorkload=false``),
    so it has no GangScheduling plugin and no pod-group cycle while kube-apiserver still serves Workload and
    PodGroup and keeps pods' ``schedulingGroup``: gang admission switched off, everything else as before."""
    extra_users: tuple[StaticUser, ...] = ()
    """More static-token users, e.g. ``StaticUser("system:node:gpu-0", ("system:nodes",))`` for a kubelet."""
    extra_args: dict[Component, tuple[str, ...]] = field(default_factory=dict)
    """More flags per component, appended after the fixture's own (a later flag wins)."""
    start_timeout: float = 180.0
    """Seconds each process gets to become healthy (kube-apiserver's first start on 2 cores takes tens)."""
    stop_timeout: float = 15.0
    """Seconds between SIGTERM and SIGKILL."""

    def __post_init__(self) -> None:
        if self.node_monitor_period <= 0 or self.node_monitor_grace_period <= self.node_monitor_period:
            raise RealClusterError(
                f"node_monitor_grace_period ({self.node_monitor_grace_period}) must exceed "
                f"node_monitor_period ({self.node_monitor_period}) > 0")
        for name in ("default_unreachable_toleration_seconds", "default_not_ready_toleration_seconds"):
            if getattr(self, name) < 0:
                raise RealClusterError(f"{name} must be >= 0, got {getattr(self, name)}")
        names = [u.name for u in (ADMIN, CONTROLLER_MANAGER_USER, SCHEDULER_USER, *self.extra_users)]
        if len(set(names)) != len(names):
            raise RealClusterError(f"static users must have distinct names, got {names}")


def read_build_info(bin_dir: Path) -> BuildInfo:
    """The versions ``build.sh`` stamped into ``bin_dir``; an error when the build is missing or partial."""
    stamp = bin_dir / STAMP_FILE
    if not stamp.is_file():
        raise RealClusterError(f"{stamp} is missing: run tests/realk8s/build.sh first")
    fields: dict[str, str] = {}
    for line in stamp.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and " " not in key:
            fields[key] = value.split()[0] if value else ""
    missing = [k for k in ("kubernetes", "etcd") if not fields.get(k)]
    if missing:
        raise RealClusterError(f"{stamp} lacks {', '.join(missing)}")
    for component in Component:
        if not os.access(bin_dir / component.value, os.X_OK):
            raise RealClusterError(f"{bin_dir / component.value} is missing or not executable")
    return BuildInfo(kubernetes=fields["kubernetes"], etcd=fields["etcd"])


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, or a note that it is empty or absent."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"({path} is empty)"


# --- PKI -----------------------------------------------------------------------------------------

def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class Pki:
    """Files of the cluster's CAs, certificates and service-account key pair."""

    ca_cert: Path
    ca_key: Path
    serving: dict[Component, tuple[Path, Path]]
    """(cert, key) for kube-apiserver, kube-controller-manager and kube-scheduler, signed by the CA."""
    front_proxy_ca: Path
    """The CA kube-apiserver trusts for request-header (aggregation) clients, as kubeadm sets it up."""
    front_proxy_client: tuple[Path, Path]
    """(cert, key) kube-apiserver presents when it proxies to an aggregated API server."""
    sa_key: Path
    sa_pub: Path
    kubelet_client: tuple[Path, Path]
    """(cert, key) kube-apiserver presents to kubelets (``--kubelet-client-certificate``), signed by the CA."""

    def issuer(self) -> _Issuer:
        """The cluster CA, to sign more certificates (kubelet serving certs)."""
        cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise RealClusterError(f"{self.ca_key} is not the EC key this fixture writes")
        return _Issuer(cert.subject, key)

    def kubelet_serving_cert(self, directory: Path, node: str) -> tuple[Path, Path]:
        """A serving cert for a kubelet stand-in of ``node`` (SAN 127.0.0.1 and the node name), signed by
        the cluster CA, so kube-apiserver's ``--kubelet-certificate-authority`` verifies it."""
        directory.mkdir(parents=True, exist_ok=True)
        return _make_leaf(directory, f"kubelet-{node}", self.issuer(), node, server=True, extra_dns=(node,))


_KEY_USAGE_CA = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False)


@dataclass(frozen=True)
class _Issuer:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2)


def _make_ca(directory: Path, stem: str, common_name: str) -> tuple[_Issuer, Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _validity()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_KEY_USAGE_CA, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _key_pem(key))
    return _Issuer(name, key), cert_path, key_path


def _make_leaf(directory: Path, stem: str, issuer: _Issuer, common_name: str, server: bool,
               extra_dns: tuple[str, ...] = (), organizations: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A serving cert for loopback (``server``) or a client cert, signed by ``issuer``."""
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity()
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations),
                                        x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(issuer.name).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
                              critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in (*SERVING_DNS_NAMES, *extra_dns)]
            + [x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False)
    cert = builder.sign(issuer.key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _key_pem(key))
    return cert_path, key_path


SERVING_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                     "kubernetes.default.svc.cluster.local")
FRONT_PROXY_CLIENT = "front-proxy-client"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"


def make_pki(directory: Path) -> Pki:
    """Fresh CAs, a loopback serving cert per TLS component, and a service-account signing key."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_cert, ca_key = _make_ca(directory, "ca", "firedrill-realk8s-ca")
    serving = {component: _make_leaf(directory, component.value, ca, component.value, server=True)
               for component in (Component.APISERVER, Component.CONTROLLER_MANAGER, Component.SCHEDULER)}
    front_proxy, front_proxy_ca, _ = _make_ca(directory, "front-proxy-ca", "firedrill-realk8s-front-proxy-ca")
    front_proxy_client = _make_leaf(directory, FRONT_PROXY_CLIENT, front_proxy, FRONT_PROXY_CLIENT, server=False)

    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_private(sa_key_path, _key_pem(sa_key))
    sa_pub_path.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
    # As kubeadm names it: kube-apiserver's client identity towards kubelets (their --client-ca-file is our CA).
    kubelet_client = _make_leaf(directory, KUBELET_CLIENT, ca, KUBELET_CLIENT, server=False,
                                organizations=("system:masters",))
    return Pki(ca_cert, ca_key, serving, front_proxy_ca, front_proxy_client, sa_key_path, sa_pub_path,
               kubelet_client)


def write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> Path:
    """A kubeconfig with one cluster, one token user and one current context (mode 0600)."""
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "realk8s", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": "realk8s", "context": {"cluster": "realk8s", "user": user}}],
           "current-context": "realk8s"}
    _write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path


# --- processes -----------------------------------------------------------------------------------

@dataclass
class _Process:
    component: Component
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]


def _http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None,
             expect: Callable[[bytes], bool] = lambda _body: True) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status == 200 and expect(response.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


@dataclass
class RealCluster:
    """The control plane's processes; ``start()`` returns when all are healthy, ``stop()`` ends them."""

    spec: RealClusterSpec
    build: BuildInfo = field(init=False)
    tokens: dict[str, str] = field(init=False, default_factory=dict)
    """Static token per user name (ADMIN.name, CONTROLLER_MANAGER_USER.name, extra users ...)."""
    pki: Pki = field(init=False)
    url: str = field(init=False, default="")
    admin_kubeconfig: Path = field(init=False)
    etcd_url: str = field(init=False, default="")
    gang: NativeGangScheduling | None = field(init=False, default=None)
    """The native gang scheduling switches in use, None when off."""
    _processes: list[_Process] = field(init=False, default_factory=list)
    _started: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.build = read_build_info(self.spec.bin_dir)
        self.gang = self._gang_scheduling()

    def _gang_scheduling(self) -> NativeGangScheduling | None:
        if not self.spec.native_gang_scheduling:
            return None
        gang = NATIVE_GANG_SCHEDULING.get(self.build.minor)
        if gang is None:
            raise RealClusterError(
                f"native gang scheduling is not mapped for Kubernetes {self.build.kubernetes} "
                f"(known: {', '.join(sorted(NATIVE_GANG_SCHEDULING))}); pass native_gang_scheduling=False "
                "or read that version's pkg/features/kube_features.go and add it")
        return gang

    # paths
    @property
    def work_dir(self) -> Path:
        return self.spec.work_dir

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    def log_path(self, component: Component) -> Path:
        return self.log_dir / f"{component.value}.log"

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    @property
    def admin_token(self) -> str:
        return self.tokens[ADMIN.name]

    def pid(self, component: Component) -> int | None:
        """The pid of a running component, else None."""
        for proc in self._processes:
            if proc.component is component and proc.popen.poll() is None:
                return proc.popen.pid
        return None

    def exit_codes(self) -> dict[Component, int | None]:
        """Each component this object started and its exit code (None while it runs)."""
        return {proc.component: proc.popen.poll() for proc in self._processes}

    def __enter__(self) -> RealCluster:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # start
    def start(self) -> None:
        """Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler; stop all on any failure."""
        if self._started:
            raise RealClusterError("a RealCluster starts once; make a new one")
        self._started = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.pki = make_pki(self.work_dir / "pki")
        users = (ADMIN, CONTROLLER_MANAGER_USER, SCHEDULER_USER, *self.spec.extra_users)
        self.tokens = {u.name: secrets.token_hex(24) for u in users}
        token_file = self.work_dir / "tokens.csv"
        _write_private(token_file, "".join(
            f'{self.tokens[u.name]},{u.name},{u.name},"{",".join(u.groups)}"\n' for u in users).encode())
        try:
            self._start_etcd()
            self._start_apiserver(token_file)
            self.admin_kubeconfig = write_kubeconfig(self.work_dir / "admin.kubeconfig", self.url, self.ca_file,
                                                     ADMIN.name, self.admin_token)
            self._start_controller_manager()
            self._start_scheduler()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, component: Component, args: list[str]) -> _Process:
        args = [*args, *self.spec.extra_args.get(component, ())]
        log_path = self.log_path(component)
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        log_file.write(f"$ {component.value} {' '.join(args)}\n".encode())
        log_file.flush()
        try:
            popen = subprocess.Popen([str(self.spec.bin_dir / component.value), *args], stdin=subprocess.DEVNULL,
                                     stdout=log_file, stderr=subprocess.STDOUT, cwd=self.work_dir)
        except OSError as exc:
            log_file.close()
            raise RealClusterError(f"{component.value} could not be started: {exc}") from exc
        proc = _Process(component, popen, log_path, log_file)
        self._processes.append(proc)
        return proc

    def _wait_healthy(self, proc: _Process, what: str, probe: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.spec.start_timeout
        while not probe():
            code = proc.popen.poll()
            if code is not None:
                raise RealClusterError(
                    f"{proc.component.value} exited with code {code} before {what}; "
                    f"last lines of {proc.log_path}:\n{log_tail(proc.log_path)}")
            if time.monotonic() >= deadline:
                raise RealClusterError(
                    f"{proc.component.value} did not become healthy ({what}) within {self.spec.start_timeout:.0f}s;"
                    f" last lines of {proc.log_path}:\n{log_tail(proc.log_path)}")
            time.sleep(0.2)

    def _tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://{LOOPBACK}:{client_port}"
        peer_url = f"http://{LOOPBACK}:{peer_port}"
        proc = self._spawn(Component.ETCD, [
            "--name=realk8s", f"--data-dir={self.work_dir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=realk8s={peer_url}", "--initial-cluster-state=new",
            "--log-level=warn"])

        def healthy(body: bytes) -> bool:
            return json.loads(body).get("health") == "true"
        self._wait_healthy(proc, f"{self.etcd_url}/health says healthy",
                           lambda: _http_ok(f"{self.etcd_url}/health", expect=healthy))

    def _feature_gates(self, component: Component | None = None) -> list[str]:
        if self.gang is None:
            return []
        on = "false" if component is Component.SCHEDULER and not self.spec.scheduler_gang_scheduling else "true"
        return ["--feature-gates=" + ",".join(f"{gate}={on}" for gate in self.gang.feature_gates)]

    def _start_apiserver(self, token_file: Path) -> None:
        port = free_port()
        self.url = f"https://{LOOPBACK}:{port}"
        cert, key = self.pki.serving[Component.APISERVER]
        args = [
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={port}", f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}",
            # The "kubernetes" Service's endpoints would be 127.0.0.1, which Endpoints validation refuses.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--client-ca-file={self.ca_file}",
            f"--token-auth-file={token_file}",
            # Request-header authentication, so the controller-manager's and scheduler's delegated
            # authentication finds a complete extension-apiserver-authentication ConfigMap.
            f"--requestheader-client-ca-file={self.pki.front_proxy_ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki.front_proxy_client[0]}",
            f"--proxy-client-key-file={self.pki.front_proxy_client[1]}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            # Kubelets (the refplatform agents): reached at their InternalIP first, as kubeadm orders it (a
            # node's Hostname address is its name, which no resolver here knows), over TLS verified with our CA,
            # and kube-apiserver proves itself with a client cert from that CA.
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            f"--kubelet-certificate-authority={self.ca_file}",
            f"--kubelet-client-certificate={self.pki.kubelet_client[0]}",
            f"--kubelet-client-key={self.pki.kubelet_client[1]}",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--default-unreachable-toleration-seconds={self.spec.default_unreachable_toleration_seconds}",
            f"--default-not-ready-toleration-seconds={self.spec.default_not_ready_toleration_seconds}",
            "--profiling=false",
            *self._feature_gates(),
        ]
        if self.gang is not None:
            args.append(f"--runtime-config={self.gang.api_version}=true")
        proc = self._spawn(Component.APISERVER, args)
        context = self._tls_context()
        self._wait_healthy(proc, f"{self.url}/readyz says ok",
                           lambda: _http_ok(f"{self.url}/readyz", context, self.admin_token,
                                            expect=lambda body: body.strip() == b"ok"))

    def _component_args(self, component: Component, user: StaticUser) -> list[str]:
        kubeconfig = write_kubeconfig(self.work_dir / f"{component.value}.kubeconfig", self.url, self.ca_file,
                                      user.name, self.tokens[user.name])
        cert, key = self.pki.serving[component]
        return [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--secure-port={free_port()}", f"--bind-address={LOOPBACK}",
                f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
                "--leader-elect=false", "--profiling=false", *self._feature_gates(component)]

    def _wait_component(self, proc: _Process, args: list[str]) -> None:
        port = next(a.split("=", 1)[1] for a in args if a.startswith("--secure-port="))
        url = f"https://{LOOPBACK}:{port}/healthz"
        context = self._tls_context()
        self._wait_healthy(proc, f"{url} says ok",
                           lambda: _http_ok(url, context, expect=lambda body: body.strip() == b"ok"))

    def _start_controller_manager(self) -> None:
        args = self._component_args(Component.CONTROLLER_MANAGER, CONTROLLER_MANAGER_USER)
        args += [
            "--controllers=*",
            f"--node-monitor-grace-period={_duration(self.spec.node_monitor_grace_period)}",
            f"--node-monitor-period={_duration(self.spec.node_monitor_period)}",
            # Each controller acts as its own service account, as kubeadm sets it up.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki.sa_key}", f"--root-ca-file={self.ca_file}",
            f"--cluster-signing-cert-file={self.ca_file}", f"--cluster-signing-key-file={self.pki.ca_key}",
        ]
        self._wait_component(self._spawn(Component.CONTROLLER_MANAGER, args), args)

    def _start_scheduler(self) -> None:
        args = self._component_args(Component.SCHEDULER, SCHEDULER_USER)
        self._wait_component(self._spawn(Component.SCHEDULER, args), args)

    # stop
    def stop(self) -> None:
        """SIGTERM each process this object started (newest first), SIGKILL any still alive after the timeout."""
        errors: list[str] = []
        for proc in reversed(self._processes):
            if proc.log_file.closed:
                continue
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
                try:
                    proc.popen.wait(timeout=self.spec.stop_timeout)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    try:
                        proc.popen.wait(timeout=self.spec.stop_timeout)
                    except subprocess.TimeoutExpired:
                        errors.append(f"{proc.component.value} (pid {proc.popen.pid}) survived SIGKILL")
            proc.log_file.close()
        if errors:
            raise RealClusterError("; ".join(errors))


def _duration(seconds: float) -> str:
    """A Go duration string: ``2.5`` -> ``2500ms``."""
    return f"{round(seconds * 1000)}ms"
