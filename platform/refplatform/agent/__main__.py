"""``python -m refplatform.agent``: run one simulated node until SIGTERM/SIGINT.

SIGUSR1 puts the node into a simulated network partition (all API traffic
stops, pods keep running locally), SIGUSR2 heals it.  Signal handlers only
queue the request; the main thread acts on it.
"""

from __future__ import annotations

import argparse
import logging
import queue
import re
import signal
import sys
from pathlib import Path
from types import FrameType

from refplatform.agent.errors import AgentError
from refplatform.agent.gpus import MODELS
from refplatform.agent.logs import ServingTLS
from refplatform.agent.runner import Agent, AgentConfig
from refplatform.core.disruption import DisruptionPolicy
from refplatform.defects import add_defect_argument
from refplatform.gpu.mig import PartitionError

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _node_name(value: str) -> str:
    if len(value) > 253 or not _NODE_NAME.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid node name (lowercase DNS subdomain)")
    return value


def _positive_float(value: str) -> float:
    try:
        f = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not f > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be > 0")
    return f


def _fraction(value: str) -> float:
    f = _positive_float(value)
    if f > 1:
        raise argparse.ArgumentTypeError(f"{value!r} is a fraction of the cluster's nodes: in (0, 1]")
    return f


def _non_negative_int(value: str) -> int:
    try:
        i = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if i < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be >= 0")
    return i


def _node_labels(value: str) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE...]``, as the kubelet's ``--node-labels``: each key a label key, each value a label
    value."""
    labels: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        key, eq, val = item.partition("=")
        if not item or not eq or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(val):
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE with a label key and a label value, e.g. "
                                             "cloud.provider.com/topology-rack=rack-0")
        labels[key] = val
    return labels


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or action.required:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    models = ", ".join(f"{m.name} ({m.product}, {m.memory_mib} MiB)" for m in MODELS)
    p = argparse.ArgumentParser(
        prog="python -m refplatform.agent",
        description=(
            "Node agent of the Firedrill reference platform: one process per simulated GPU node. "
            "Registers the Node, renews its Lease in kube-node-lease every heartbeat, runs the pods "
            "bound to it (a container with a command as a real child process, one without as the simulated "
            "workload its firedrill.dev/workload annotation names) and serves their logs (kubelet-style "
            "/containerLogs), its health (/healthz) and its GPUs' metrics (/metrics). Stops cleanly on SIGTERM "
            "or SIGINT, ending its pods' processes first. SIGUSR1 simulates a network partition "
            "(all API traffic stops, pods keep running); SIGUSR2 heals it."
        ),
        epilog=(
            f"GPU models: {models}. When NVML finds real GPUs they are reported instead of --gpus/--gpu-model "
            "unless --simulate-gpus is given. Files: DIR/agents/NODE.json (pid, log port) once started; "
            "container logs under DIR/logs/NODE/; pod directories under DIR/nodes/NODE/; nfs volumes under "
            "DIR/nfs/; the simulated GPU driver's socket DIR/nodes/NODE/device.sock."
        ),
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--api", required=True, metavar="URL", help="API server base URL, e.g. https://127.0.0.1:6443")
    p.add_argument("--token-file", type=Path, metavar="FILE", help="file holding a bearer token for the API server")
    p.add_argument("--ca-file", type=Path, metavar="FILE",
                   help="CA certificate(s) that verify an https API server (default: the system trust store)")
    p.add_argument("--node", required=True, type=_node_name, metavar="NAME", help="the Node's name")
    p.add_argument("--data-dir", required=True, type=Path, metavar="DIR", help="platform data directory")
    p.add_argument("--gpus", type=_non_negative_int, default=8, metavar="N", help="simulated GPU count")
    p.add_argument("--gpu-model", default="H100-80GB", metavar="MODEL", help="simulated GPU model (see below)")
    p.add_argument("--simulate-gpus", action="store_true", help="simulate GPUs even if NVML finds real ones")
    p.add_argument("--heartbeat", type=_positive_float, default=1.0, metavar="SECONDS",
                   help="Lease renewal interval; the lease lasts 4x this, rounded up")
    p.add_argument("--fence-after", type=_positive_float, metavar="SECONDS",
                   help="fence this node (kill its pods) after this long without a Lease renewal while a peer agent "
                        "still reaches the API, so no old rank trains beside its replacement (default: never, like "
                        "the kubelet; the tuned profile sets it)")
    p.add_argument("--unhealthy-zone-threshold", type=_fraction, default=0.55, metavar="FRACTION",
                   help="the control plane's disruption threshold: a cut-off node does not fence itself when more "
                        "than 2 nodes and at least this fraction of the cluster are cut off with it (a disruption "
                        "the control plane does not evict in; default 0.55 as kube-controller-manager)")
    p.add_argument("--large-cluster-size-threshold", type=_non_negative_int, default=50, metavar="NODES",
                   help="the control plane still evicts, slowly, in a disruption of a cluster larger than this, so "
                        "a cut-off node of such a cluster fences itself (default 50 as kube-controller-manager)")
    p.add_argument("--status-every", type=_non_negative_int, default=10, metavar="N",
                   help="refresh the Node's Ready condition every N heartbeats")
    p.add_argument("--node-group", metavar="GROUP", help="value of the firedrill.dev/node-group label")
    p.add_argument("--node-labels", type=_node_labels, action="append", default=[], metavar="KEY=VALUE,...",
                   help="labels the Node registers with, as the kubelet's flag (repeatable): its rack or NVLink "
                        "domain, e.g. cloud.provider.com/topology-rack=rack-0; the agent's own labels win")
    p.add_argument("--link-bandwidth", type=_positive_float, metavar="BYTES_PER_S",
                   help="this node's link to the fabric: told to every container as FIREDRILL_LINK_BANDWIDTH, to "
                        "which the canary paces its connections (refplatform.fabric; default: none told)")
    p.add_argument("--burn-in-seconds", type=_positive_float, default=2.0, metavar="SECONDS",
                   help="how long a whole GPU whose Xid cleared, or whose hold a person cleared, is burnt in (a "
                        "diagnostic and a collective on the node) before it returns to service (docs/HEALING.md)")
    p.add_argument("--flap-window", type=_positive_float, default=60.0, metavar="SECONDS",
                   help="a GPU that fails again within this long of its return is held out of service until a person "
                        "clears it (the Node annotation firedrill.dev/clear-gpus)")
    p.add_argument("--cpu", default="64", help="cpu capacity (a quantity)")
    p.add_argument("--memory", default="512Gi", help="memory capacity (a quantity)")
    p.add_argument("--max-pods", type=_non_negative_int, default=110, metavar="N", help="pods capacity")
    p.add_argument("--log-port", type=_non_negative_int, default=0, metavar="PORT",
                   help="port of the log server on 127.0.0.1 (0: any free port)")
    p.add_argument("--tls-cert-file", type=Path, metavar="FILE",
                   help="serve the log endpoint over HTTPS with this certificate (PEM), as a kubelet serves "
                        "kube-apiserver's log proxy; needs --tls-private-key-file")
    p.add_argument("--tls-private-key-file", type=Path, metavar="FILE", help="the key of --tls-cert-file (PEM)")
    p.add_argument("--client-ca-file", type=Path, metavar="FILE",
                   help="with --tls-cert-file: /containerLogs answers only clients whose certificate this CA signed "
                        "(kube-apiserver's --kubelet-client-certificate); /healthz and /metrics stay open unless "
                        "--client-tokens-file is given")
    p.add_argument("--client-tokens-file", type=Path, metavar="FILE",
                   help="who may call this agent's endpoints: a YAML allow-list of token SHA-256 digests and the "
                        "endpoints (logs, metrics, healthz, proxy) each may call (refplatform.agent.access; the "
                        "embedded cluster writes DIR/agent-clients.yaml); re-read when it changes. No credentials: "
                        "401; an identity not allowed: 403; each refusal goes to --audit-log-path. Without it the "
                        "endpoints are open (only /containerLogs behind --client-ca-file)")
    p.add_argument("--audit-log-path", type=Path, metavar="FILE",
                   help="append each refused call as an audit.k8s.io/v1 Event JSON line "
                        "(default: DIR/nodes/NODE/audit.log)")
    p.add_argument("--peer-poll", type=_positive_float, default=0.5, metavar="SECONDS",
                   help="interval of the poll of each job's pods that gates a training rank's steps")
    p.add_argument("--peer-stale", type=_positive_float, metavar="SECONDS",
                   help="a rank stalls when its view of the gang is older than this (default: 3 x --peer-poll)")
    p.add_argument("--freeze-threshold", type=_positive_float, default=2.0, metavar="SECONDS",
                   help="a wait overrunning by this much means the agent was frozen (SIGSTOP): thaw and resync")
    p.add_argument("--partition-config", type=Path, metavar="FILE",
                   help="GPU partitioning (YAML: mode none|mig-single|mig-mixed|time-slicing|hami, see "
                        "docs/PARTITIONING.md); an invalid file is refused with exit code 2")
    p.add_argument("--pod-cidr", metavar="CIDR",
                   help="range of this node's pod IPs, e.g. 127.10.0.0/24 (default: a /24 in 127.64.0.0/10 "
                        "derived from the node name); outside 127.0.0.0/8 only where the whole range is local, "
                        "as on the lo of a network namespace you created")
    add_defect_argument(p)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="agent log level")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s %(levelname)s agent[{args.node}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("refplatform.agent")
    token = None
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip() or None
        except OSError as err:
            log.error("cannot read token file: %s", err)
            return 1
    if args.client_tokens_file is not None and not args.client_tokens_file.is_file():
        log.error("--client-tokens-file %s does not exist", args.client_tokens_file)
        return 1
    if args.client_tokens_file is None:
        log.warning("no --client-tokens-file: this node's /metrics and /healthz answer anyone%s",
                    "" if args.client_ca_file else ", and so do its container logs")
    if args.ca_file is not None and not args.ca_file.is_file():
        log.error("CA file %s does not exist", args.ca_file)
        return 1
    serving_tls = None
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        log.error("--tls-cert-file and --tls-private-key-file go together")
        return 1
    if args.client_ca_file is not None and args.tls_cert_file is None:
        log.error("--client-ca-file needs --tls-cert-file (client certificates exist only over TLS)")
        return 1
    if args.tls_cert_file is not None and args.tls_private_key_file is not None:
        for flag, path in (("--tls-cert-file", args.tls_cert_file), ("--tls-private-key-file", args.tls_private_key_file),
                           ("--client-ca-file", args.client_ca_file)):
            if path is not None and not path.is_file():
                log.error("%s %s does not exist", flag, path)
                return 1
        serving_tls = ServingTLS(args.tls_cert_file, args.tls_private_key_file, args.client_ca_file)
    try:
        config = AgentConfig(
            api_url=args.api,
            node=args.node,
            data_dir=args.data_dir,
            token=token,
            ca_file=args.ca_file,
            gpus=args.gpus,
            gpu_model=args.gpu_model,
            heartbeat=args.heartbeat,
            fence_after=args.fence_after,
            disruption=DisruptionPolicy(unhealthy_zone_threshold=args.unhealthy_zone_threshold,
                                        large_cluster_size_threshold=args.large_cluster_size_threshold),
            defects=frozenset(args.defects),
            node_group=args.node_group,
            simulate_gpus=args.simulate_gpus,
            cpu=args.cpu,
            memory=args.memory,
            max_pods=args.max_pods,
            status_every=max(1, args.status_every),
            log_port=args.log_port,
            peer_poll=args.peer_poll,
            peer_stale=args.peer_stale,
            freeze_threshold=args.freeze_threshold,
            partition_config=args.partition_config,
            pod_cidr=args.pod_cidr,
            serving_tls=serving_tls,
            client_tokens_file=args.client_tokens_file,
            audit_log_path=args.audit_log_path,
            node_labels={k: v for labels in args.node_labels for k, v in labels.items()},
            link_bandwidth=args.link_bandwidth,
            burn_in_seconds=args.burn_in_seconds,
            flap_window=args.flap_window,
        )
        agent = Agent(config)
    except PartitionError as err:
        log.error("invalid partition config: %s", err)
        return 2
    except (AgentError, ValueError, OSError) as err:
        log.error("%s", err)
        return 1

    requests: queue.SimpleQueue[int] = queue.SimpleQueue()

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        requests.put(signum)  # nothing else in a handler: the main thread acts on it

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, _on_signal)
    agent.start()
    try:
        while True:
            try:
                signum = requests.get(timeout=0.5)
            except queue.Empty:
                continue
            name = signal.Signals(signum).name
            if signum == signal.SIGUSR1:
                log.info("received %s: simulating a network partition", name)
                agent.partition()
            elif signum == signal.SIGUSR2:
                log.info("received %s: healing the network partition", name)
                agent.heal()
            else:
                log.info("received %s, stopping", name)
                break
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
