"""Start-up of one API server process: bind on loopback, announce the address, serve.

The server writes ``DIR/apiserver.json`` (``{"url": ..., "pid": ...}``) once
its socket is listening, so whoever started it waits on that file instead of
guessing a port.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import logging
import os
import socket
import sys
from pathlib import Path

import uvicorn

from refplatform.api.app import MAX_BODY_BYTES, ApiServer, ServerSettings
from refplatform.api.audit import AuditLog
from refplatform.api.auth import TokenAuthenticator, TokensFileError
from refplatform.api.coalescing import CoalescingH11Protocol, httptools_protocol
from refplatform.api.service import ApiService
from refplatform.api.usagelog import UsageRecorder
from refplatform.defects import add_defect_argument
from refplatform.store import Durability, Store

ADDRESS_FILE = "apiserver.json"
AUDIT_FILE = "audit.log"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m refplatform.api",
        description="Serve the reference platform's Kubernetes API on loopback, storing objects in "
                    "SQLite under --data-dir. Restarting on the same directory keeps every object.")
    p.add_argument("--data-dir", type=Path, required=True, help="directory for store.sqlite3 and apiserver.json")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default 0)")
    p.add_argument("--tokens-file", type=Path,
                   help="YAML bearer tokens (cluster-admin, controller, scheduler, node and tenant identities; "
                        "re-read when an unknown token arrives and the file changed); without it the server is open")
    p.add_argument("--audit-log-path", type=Path,
                   help=f"append one audit.k8s.io/v1 Event per audited request (JSON lines) to this file "
                        f"(default: DATA_DIR/{AUDIT_FILE}); audited: every write, every refusal, reads with "
                        "--audit-reads")
    p.add_argument("--no-audit-log", action="store_true",
                   help="record nothing (for measuring what auditing costs; never on a cluster in use)")
    p.add_argument("--audit-reads", action="store_true",
                   help="also audit every read (get, list, watch, discovery), not only writes and refusals")
    p.add_argument("--limited-priority-class", dest="limited_priority_classes", action="append", default=[],
                   metavar="NAME", help="a PriorityClass a pod may use only in a namespace with a ResourceQuota "
                                        "whose scopeSelector selects it (repeatable)")
    p.add_argument("--kubelet-client-token-file", type=Path,
                   help="a file holding the bearer token sent to node agents when proxying pods/log")
    p.add_argument("--durability", choices=[d.value for d in Durability], default=Durability.NORMAL.value,
                   help="normal: survives a killed server; full: fsync every commit, survives power loss")
    p.add_argument("--changelog-limit", type=int, default=10_000,
                   help="changes kept for watch resumes; older versions get 410 Gone (default 10000)")
    p.add_argument("--bookmark-interval", type=float, default=10.0,
                   help="seconds of quiet before a watch that allows bookmarks gets one (default 10)")
    p.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM); with --tls-private-key-file, "
                   "serve HTTPS, which kubectl needs before it sends a bearer token")
    p.add_argument("--tls-private-key-file", type=Path, help="the serving certificate's private key (PEM)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help="largest request body accepted")
    p.add_argument("--http", choices=["httptools", "h11"], default="httptools",
                   help="uvicorn's HTTP/1.1 implementation: httptools (C, the default: about a fifth less server "
                        "CPU a request; see docs/SCHEDULER.md, End-to-end throughput) or h11 (pure Python)")
    add_defect_argument(p)
    return p


GC_THRESHOLDS = (20_000, 50, 100)
"""The cyclic garbage collector's generation thresholds for the API server (Python's default: 700, 10, 10)."""


def tune_garbage_collector() -> None:
    """The store keeps every object in memory as nested dicts (each with its managedFields trie), so the
    collector's default young-generation threshold walks them thousands of times a second under a write load,
    for cycles the server hardly makes (refcounting frees the rest).  Freeze what startup made and collect
    less often: about a fifth more creates per second (docs/BENCHMARKS.md, issue 28)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s apiserver %(levelname)s %(message)s")
    log = logging.getLogger("refplatform.api")
    try:
        if not ipaddress.ip_address(args.host).is_loopback:
            print(f"error: --host {args.host} is not a loopback address; the reference platform only "
                  "serves on loopback (127.0.0.0/8 or ::1)", file=sys.stderr)
            return 2
    except ValueError:
        print(f"error: --host {args.host!r} is not an IP address; use 127.0.0.1", file=sys.stderr)
        return 2
    try:
        authenticator = TokenAuthenticator.from_file(args.tokens_file) if args.tokens_file else None
    except TokensFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kubelet_token = ""
    if args.kubelet_client_token_file:
        try:
            kubelet_token = args.kubelet_client_token_file.read_text().strip()
        except OSError as exc:
            print(f"error: cannot read --kubelet-client-token-file {args.kubelet_client_token_file}: "
                  f"{exc.strerror}", file=sys.stderr)
            return 2
    if args.http == "httptools":
        try:
            import httptools  # noqa: F401
        except ImportError:
            print("error: --http httptools needs the httptools package (pip install httptools, a dependency "
                  "of firedrill); or run the API server with --http h11", file=sys.stderr)
            return 2
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        print("error: give both --tls-cert-file and --tls-private-key-file, or neither", file=sys.stderr)
        return 2
    if args.defects:
        log.warning("running with defect(s) from the zoo: %s", ", ".join(sorted(d.value for d in args.defects)))
    if authenticator is None:
        log.warning("no --tokens-file: authentication is OFF, every caller is cluster-admin")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(args.data_dir, changelog_limit=args.changelog_limit, durability=Durability(args.durability))
    service = ApiService(store)
    audit = None if args.no_audit_log else AuditLog(args.audit_log_path or args.data_dir / AUDIT_FILE,
                                                      include_reads=args.audit_reads)
    if audit is None:
        log.warning("--no-audit-log: no request is recorded")
    # The leak report's own accounting: every commit, stamped with the service's clock (usage.sqlite3).
    usage = UsageRecorder(store, args.data_dir, clock=lambda: service.clock().timestamp()).start()
    server = ApiServer(service, authenticator,
                       ServerSettings(max_body_bytes=args.max_body_bytes, bookmark_interval=args.bookmark_interval,
                                      defects=frozenset(args.defects),
                                      limited_priority_classes=frozenset(args.limited_priority_classes),
                                      kubelet_client_token=kubelet_token),
                       usage=usage, audit=audit)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP,
    # and without it every small answer waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}; pick another --port "
              "or 0 for any free port", file=sys.stderr)
        return 2
    sock.listen(512)
    host, port = sock.getsockname()[:2]
    scheme = "https" if args.tls_cert_file else "http"
    url = f"{scheme}://{host if family == socket.AF_INET else f'[{host}]'}:{port}"
    address_file = args.data_dir / ADDRESS_FILE
    tmp = address_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    os.replace(tmp, address_file)
    log.info("serving the Kubernetes API at %s (data in %s, %d objects)", url, args.data_dir,
             sum(store.count(rt.key) for rt in server.service.registry.types))
    config = uvicorn.Config(server.app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1,
                            http=httptools_protocol() if args.http == "httptools" else CoalescingH11Protocol,
                            ssl_certfile=str(args.tls_cert_file) if args.tls_cert_file else None,
                            ssl_keyfile=str(args.tls_private_key_file) if args.tls_private_key_file else None)
    tune_garbage_collector()
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        if audit is not None:
            audit.close()
        usage.close()
        store.close()
        address_file.unlink(missing_ok=True)
    return 0
