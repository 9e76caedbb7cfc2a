"""Rendezvous: the ranks find rank 0 and form a star of TCP connections, the way torch.distributed starts.

- TCP (``MASTER_ADDR``/``MASTER_PORT``): rank 0 listens there (on ``POD_IP``
  when set, else on ``MASTER_ADDR`` itself, else on every interface when that
  is not a local address); the others connect, retrying until the timeout.
- File (``--rendezvous-dir``): rank 0 listens on ``POD_IP`` (default
  127.0.0.1), port 0, and atomically writes ``DIR/master-<generation>.json``
  ``{"addr", "port", "nonce"}``; the others poll that file and connect.

Each rank sends ``HELLO`` (rank, world size, generation, the file's nonce);
rank 0 answers every rank with ``WELCOME`` once the whole world has said hello,
carrying the step to resume from (rank 0 chose it from the checkpoints), so
every rank agrees.  The hello and the welcome also carry each end's link bandwidth (``link``:
``FIREDRILL_LINK_BANDWIDTH``, null when unset), and each connection is paced to the slower of the two
(:func:`drills.canary.wire.paced_rate`).  A hello that does not fit (another generation or world
size, a rank out of range, a stale nonce) is refused; the refused rank retries
until its timeout, and the error names the last refusal.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drills.canary.checkpoint import Resume, write_atomically
from drills.canary.config import Config, RendezvousMode
from drills.canary.errors import ProtocolError, RendezvousError
from drills.canary.interrupts import Interrupts
from drills.canary.wire import Conn, ConnectionLost, Kind, encode_json, paced_rate

__all__ = ["World", "master_file", "rendezvous"]

RETRY_SECONDS = 0.1
CONNECT_SECONDS = 1.0


@dataclass
class World:
    """The star, once complete: rank 0 holds a connection per other rank, the others one to rank 0."""

    master: str | None
    """``addr:port`` rank 0 listened on (None: a world of one)."""
    conns: dict[int, Conn]
    """Rank 0: the other ranks by rank; any other rank: ``{0: rank 0}``."""
    resume: Resume
    seconds: float

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


def master_file(directory: Path, generation: str) -> Path:
    return directory / f"master-{generation}.json"


def rendezvous(cfg: Config, resume: Resume, interrupts: Interrupts,
               clock: Callable[[], float] = time.monotonic) -> World:
    """Form the world; rank 0 passes the resume point it chose, the others get it from rank 0."""
    started = clock()
    if cfg.rendezvous is RendezvousMode.NONE:
        return World(None, {}, resume, 0.0)
    deadline = started + cfg.rendezvous_timeout
    if cfg.rank == 0:
        master, conns = _serve(cfg, resume, interrupts, clock, deadline)
    else:
        master, conns, resume = _join(cfg, interrupts, clock, deadline)
    return World(master, conns, resume, clock() - started)


def _listen(cfg: Config) -> socket.socket:
    if cfg.rendezvous is RendezvousMode.FILE:
        host, port = cfg.pod_ip or "127.0.0.1", 0
    else:
        assert cfg.master_addr is not None and cfg.master_port is not None
        host, port = cfg.pod_ip or cfg.master_addr, cfg.master_port
    family = socket.AF_INET
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        pass  # a host name (MASTER_ADDR); create_server resolves it
    try:
        return socket.create_server((host, port), family=family, backlog=max(16, cfg.world_size))
    except socket.gaierror:
        pass
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL or cfg.pod_ip is not None:
            raise RendezvousError(f"rank 0 cannot listen on {host}:{port}: {exc}") from exc
    try:  # MASTER_ADDR is not an address of this host (a Service in front of it): every interface
        return socket.create_server(("", port), family=family, backlog=max(16, cfg.world_size))
    except OSError as exc:
        raise RendezvousError(f"rank 0 cannot listen on port {port}: {exc}") from exc


def _serve(cfg: Config, resume: Resume, interrupts: Interrupts, clock: Callable[[], float],
           deadline: float) -> tuple[str, dict[int, Conn]]:
    listener = _listen(cfg)
    listener.setblocking(False)
    addr, port = listener.getsockname()[:2]
    master = f"{addr}:{port}"
    nonce: str | None = None
    if cfg.rendezvous is RendezvousMode.FILE:
        assert cfg.rendezvous_dir is not None
        nonce = secrets.token_hex(8)
        try:
            cfg.rendezvous_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(master_file(cfg.rendezvous_dir, cfg.generation),
                             json.dumps({"addr": addr, "port": port, "nonce": nonce}).encode() + b"\n")
        except OSError as exc:
            listener.close()
            raise RendezvousError(f"cannot publish rank 0's address in {cfg.rendezvous_dir}: {exc}") from exc
    pending: list[Conn] = []
    ranks: dict[int, Conn] = {}
    refused: list[Conn] = []
    try:
        while len(ranks) < cfg.world_size - 1:
            now = clock()
            if now >= deadline:
                missing = sorted(set(range(1, cfg.world_size)) - set(ranks))
                raise RendezvousError(f"rank 0 waited {cfg.rendezvous_timeout:g} s on {master} for ranks "
                                      f"{missing} of {cfg.world_size}")
            conns = [*pending, *ranks.values()]
            readable, writable = interrupts.wait([listener, *(c.sock for c in conns)],
                                                 [c.sock for c in refused], deadline - now)
            for conn in [c for c in refused if c.sock in writable]:
                try:
                    done = conn.flush()
                except ConnectionLost:
                    done = True
                if done:
                    refused.remove(conn)
                    conn.close()
            if listener in readable:
                _accept(listener, pending)
            for conn in [c for c in conns if c.sock in readable]:
                try:
                    conn.fill()
                except ConnectionLost:  # gone before the world was complete: it may come again
                    conn.close()
                    if conn in pending:
                        pending.remove(conn)
                    else:
                        ranks.pop(int(conn.peer))
                    continue
                if conn not in pending:
                    continue  # said hello already; anything more before the welcome is ignored
                hello = conn.frame()
                if hello is None:
                    continue
                pending.remove(conn)
                try:
                    said = hello.json() if hello.kind is Kind.HELLO else {}
                    rank = _check_hello(cfg, said, nonce)
                except ProtocolError as exc:
                    conn.queue(encode_json(Kind.WELCOME, {"ok": False, "error": str(exc)}))
                    refused.append(conn)
                    continue
                if rank in ranks:  # the same rank again (it restarted): the newer connection wins
                    ranks.pop(rank).close()
                conn.peer = rank
                conn.rate = paced_rate(cfg.link_bandwidth, said.get("link"))
                ranks[rank] = conn
        welcome = encode_json(Kind.WELCOME, {"ok": True, "from_step": resume.from_step,
                                             "checkpoint": resume.checkpoint, "skipped": resume.skipped,
                                             "state": resume.state, "link": cfg.link_bandwidth})
        for conn in ranks.values():
            conn.queue(welcome)
            try:
                conn.flush()  # small: the socket takes it now; the first collective sends any rest
            except ConnectionLost:
                pass  # the first collective finds the loss and reports it
        return master, ranks
    except BaseException:
        for conn in ranks.values():
            conn.close()
        raise
    finally:
        listener.close()
        for conn in [*pending, *refused]:
            conn.close()


def _accept(listener: socket.socket, pending: list[Conn]) -> None:
    while True:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        pending.append(Conn(sock, "unknown"))


def _check_hello(cfg: Config, hello: dict[str, Any], nonce: str | None) -> int:
    rank = hello.get("rank")
    if hello.get("generation") != cfg.generation:
        raise ProtocolError(f"rank 0 is generation {cfg.generation!r}, the hello says {hello.get('generation')!r}")
    if hello.get("world_size") != cfg.world_size:
        raise ProtocolError(f"rank 0 has WORLD_SIZE={cfg.world_size}, the hello says {hello.get('world_size')!r}")
    if not isinstance(rank, int) or not 1 <= rank < cfg.world_size:
        raise ProtocolError(f"rank {rank!r} is not one of 1..{cfg.world_size - 1}")
    if nonce is not None and hello.get("nonce") != nonce:
        raise ProtocolError("stale rendezvous file: the nonce is not rank 0's")
    return rank


def _read_master_file(path: Path) -> tuple[str, int, str | None] | None:
    try:
        value = json.loads(path.read_bytes())
        return str(value["addr"]), int(value["port"]), value.get("nonce")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _join(cfg: Config, interrupts: Interrupts, clock: Callable[[], float],
          deadline: float) -> tuple[str, dict[int, Conn], Resume]:
    last = "rank 0 not found yet"
    while True:
        now = clock()
        if now >= deadline:
            raise RendezvousError(f"rank {cfg.rank} found no complete world within {cfg.rendezvous_timeout:g} s: "
                                  f"{last}")
        if cfg.rendezvous is RendezvousMode.FILE:
            assert cfg.rendezvous_dir is not None
            path = master_file(cfg.rendezvous_dir, cfg.generation)
            found = _read_master_file(path)
            if found is None:
                last = f"no readable {path}"
                interrupts.sleep(min(RETRY_SECONDS, max(0.0, deadline - clock())))
                continue
            host, port, nonce = found
        else:
            assert cfg.master_addr is not None and cfg.master_port is not None
            host, port, nonce = cfg.master_addr, cfg.master_port, None
        try:
            sock = socket.create_connection((host, port), timeout=min(CONNECT_SECONDS, max(0.01, deadline - now)))
        except OSError as exc:
            last = f"cannot connect to rank 0 at {host}:{port}: {exc}"
            interrupts.sleep(min(RETRY_SECONDS, max(0.0, deadline - clock())))
            continue
        conn = Conn(sock, "master")
        conn.queue(encode_json(Kind.HELLO, {"rank": cfg.rank, "world_size": cfg.world_size,
                                            "generation": cfg.generation, "nonce": nonce,
                                            "link": cfg.link_bandwidth}))
        try:
            welcome = _await_welcome(conn, interrupts, clock, deadline)
        except (ConnectionLost, ProtocolError) as exc:
            conn.close()
            last = f"rank 0 at {host}:{port} closed the connection before the world was complete ({exc})"
            interrupts.sleep(min(RETRY_SECONDS, max(0.0, deadline - clock())))
            continue
        except BaseException:
            conn.close()
            raise
        if welcome is None:
            conn.close()
            last = f"rank 0 at {host}:{port} never welcomed rank {cfg.rank}"
            continue
        if not welcome.get("ok"):
            conn.close()
            last = f"rank 0 at {host}:{port} refused rank {cfg.rank}: {welcome.get('error')}"
            interrupts.sleep(min(RETRY_SECONDS, max(0.0, deadline - clock())))
            continue
        try:
            resume = Resume(int(welcome["from_step"]), welcome.get("checkpoint"), list(welcome.get("skipped", [])),
                            dict(welcome.get("state") or {}))
        except (KeyError, TypeError, ValueError):
            conn.close()
            raise ProtocolError(f"rank 0's welcome is malformed: {welcome!r}") from None
        conn.rate = paced_rate(cfg.link_bandwidth, welcome.get("link"))
        return f"{host}:{port}", {0: conn}, resume


def _await_welcome(conn: Conn, interrupts: Interrupts, clock: Callable[[], float],
                   deadline: float) -> dict[str, Any] | None:
    while True:
        now = clock()
        if now >= deadline:
            return None
        readable, writable = interrupts.wait([conn.sock], [conn.sock] if conn.pending_write else [], deadline - now)
        if writable:
            conn.flush()
        if readable:
            conn.fill()
            frame = conn.frame()
            if frame is not None:
                if frame.kind is not Kind.WELCOME:
                    raise ProtocolError(f"expected WELCOME, got {frame.kind.name}")
                return frame.json()
