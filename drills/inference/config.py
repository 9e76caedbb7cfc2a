"""The inference canary's settings: command-line options and environment variables, checked, as one :class:`Config`.

Every bad value raises :class:`UsageError` naming the option or variable and what it got.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from drills.inference.errors import UsageError

__all__ = ["DRAIN_SECONDS", "MAX_TOKENS_LIMIT", "Config", "build_parser", "parse_config"]

PROG = "firedrill-inference"
DRAIN_SECONDS = 10.0
"""After SIGTERM, admitted requests get this long to finish before the process exits anyway."""
MAX_TOKENS_LIMIT = 4096
"""The largest ``max_tokens`` a request may ask for."""
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}")

ENVIRONMENT = """\
environment (an empty variable counts as unset):
  POD_IP                     the address to listen on when --host is not given (downward API
                             status.podIP); default 127.0.0.1
  FIREDRILL_DEVICE_SOCKET    default of --device-socket: the node's (simulated) GPU driver socket,
                             a UNIX datagram socket; the server sends it 'compute' while any request
                             runs and 'idle' otherwise; unset: nothing is sent

endpoints: POST /v1/completions (OpenAI completions, stream true: Server-Sent Events),
GET /health (200, or 503 while warming up or draining), GET /metrics (Prometheus text,
vLLM's metric names).

output: one JSON object per line on stdout (events start, listening, ready, served,
rejected, aborted, draining, exit), each with seq, ts and event; the fields of each
event are in docs/WORKLOAD.md.

exit codes: 143 SIGTERM (after draining admitted requests, at most 10 s), 130 SIGINT,
1 the address or port file cannot be used, or another error, 2 a bad option or
environment variable.
"""


@dataclass(frozen=True)
class Config:
    """Everything the inference canary was asked to do, checked."""

    host: str
    host_from: str
    """Where the host came from: ``--host``, ``POD_IP`` or ``default``."""
    port: int
    """0: any free port (the bound one is logged and written to ``port_file``)."""
    model: str
    """The one model served: the ``model`` of responses and the ``model_name`` label of the metrics."""
    ttft_seconds: float
    tpot_seconds: float
    max_batch: int
    max_queue: int
    warmup_seconds: float
    port_file: Path | None
    device_socket: str | None
    gpus: tuple[str, ...] | None = None
    """The GPUs this replica was given, as ``NVIDIA_VISIBLE_DEVICES`` names them; None when it is unset."""

    def as_log(self) -> dict[str, Any]:
        """The settings as the ``start`` line's ``config``."""
        return {
            "host": self.host, "host_from": self.host_from, "port": self.port, "model": self.model,
            "ttft_seconds": self.ttft_seconds, "tpot_seconds": self.tpot_seconds,
            "max_batch": self.max_batch, "max_queue": self.max_queue, "warmup_seconds": self.warmup_seconds,
            "port_file": None if self.port_file is None else str(self.port_file),
            "device_socket": self.device_socket, "drain_seconds": DRAIN_SECONDS,
        }


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _count(minimum: int, maximum: int | None = None) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {value}")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an IP address, got {text!r}") from None


def _model(text: str) -> str:
    if not MODEL_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected 1-128 letters, digits, '.', '_', '/', ':' or '-', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Firedrill's inference canary: an LLM inference server in "
                                            "miniature whose own log and metrics are the truth a drill judges by.",
                     epilog="run `firedrill-inference serve --help` for the options; the contract is "
                            "docs/WORKLOAD.md.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="serve", parser_class=_Parser)
    serve = sub.add_parser(
        "serve", help="serve OpenAI-style completions with a bounded batch and queue",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve POST /v1/completions. A request waits in a queue of at most --max-queue until one "
                    "of --max-batch slots is free; then its first token comes --ttft-seconds later and one more "
                    "every --tpot-seconds until max_tokens. A full queue answers 429; warm-up and draining "
                    "answer 503. SIGTERM drains: admitted requests finish, then exit 143.",
        epilog=ENVIRONMENT)
    add = serve.add_argument
    add("--host", type=_address, default=None, metavar="ADDR",
        help="the IP address to listen on (default $POD_IP, else 127.0.0.1)")
    add("--port", type=_count(0, 65535), default=0, metavar="N",
        help="the TCP port (0: any free port, logged in 'listening' and written to --port-file; default 0)")
    add("--model", type=_model, default="firedrill-canary", metavar="NAME",
        help="the served model's name: the 'model' of responses and the model_name label of the metrics; "
             "a request may name any model (default firedrill-canary)")
    add("--ttft-seconds", type=_seconds, default=0.05, metavar="S",
        help="seconds from admission to the batch to the first token (default 0.05)")
    add("--tpot-seconds", type=_seconds, default=0.01, metavar="S",
        help="seconds between output tokens (default 0.01)")
    add("--max-batch", type=_count(1), default=8, metavar="N",
        help="requests generating at once (default 8)")
    add("--max-queue", type=_count(0), default=64, metavar="N",
        help="requests waiting for a batch slot; one more is answered 429 (default 64)")
    add("--warmup-seconds", type=_seconds, default=0.0, metavar="S",
        help="seconds after start that stand for model load: /health and completions answer 503 "
             "(default 0)")
    add("--port-file", default=None, metavar="PATH",
        help="write the bound port (decimal, newline) to PATH, atomically, once listening")
    add("--device-socket", default=None, metavar="PATH",
        help="the node's GPU driver socket (default $FIREDRILL_DEVICE_SOCKET; none: nothing is sent)")
    return parser


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def parse_config(argv: Sequence[str], env: Mapping[str, str]) -> Config:
    """The settings of ``firedrill-inference serve ARGV...`` under ``env``; raises :class:`UsageError`."""
    args = build_parser().parse_args(list(argv))
    if args.host is not None:
        host, host_from = args.host, "--host"
    else:
        pod_ip = _env(env, "POD_IP")
        if pod_ip is None:
            host, host_from = "127.0.0.1", "default"
        else:
            try:
                host, host_from = str(ipaddress.ip_address(pod_ip)), "POD_IP"
            except ValueError:
                raise UsageError(f"{PROG}: environment variable POD_IP: expected an IP address, "
                                 f"got {pod_ip!r}") from None
    if args.port_file is not None and not args.port_file.strip():
        raise UsageError(f"{PROG}: --port-file: expected a path, got {args.port_file!r}")
    device = args.device_socket if args.device_socket is not None else _env(env, "FIREDRILL_DEVICE_SOCKET")
    return Config(
        host=host, host_from=host_from, port=args.port, model=args.model, ttft_seconds=args.ttft_seconds,
        tpot_seconds=args.tpot_seconds, max_batch=args.max_batch, max_queue=args.max_queue,
        warmup_seconds=args.warmup_seconds, port_file=None if args.port_file is None else Path(args.port_file),
        device_socket=device or None, gpus=visible_gpus(env))


def visible_gpus(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The devices ``NVIDIA_VISIBLE_DEVICES`` names, None when it is unset or empty."""
    raw = _env(env, "NVIDIA_VISIBLE_DEVICES")
    return None if raw is None else tuple(d.strip() for d in raw.split(",") if d.strip())
