"""The serving state without HTTP: phases, refusals, and the served counter, log and device kept in step
(a made-up clock; no thread waits)."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest

from drills.inference.admission import Ticket
from drills.inference.config import parse_config
from drills.inference.device import Device
from drills.inference.log import EventLog
from drills.inference.metrics import parse_samples
from drills.inference.server import Outcome, Phase, Refusal, Service

L = 'model_name="m"'


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def service(device: Device | None = None, **flags: str) -> tuple[Service, io.StringIO, Clock]:
    argv = ["serve", "--model", "m"] + [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", v)]
    out, clock = io.StringIO(), Clock()
    svc = Service(parse_config(argv, {}), EventLog(out, wall=lambda: 0.0), device or Device(None), clock=clock)
    return svc, out, clock


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def ticket(svc: Service, rid: str) -> Ticket:
    placed = svc.enter(rid, svc.clock())
    assert isinstance(placed, Ticket), placed
    return placed


def test_warming_refuses_ready_admits_draining_refuses() -> None:
    svc, out, _ = service()
    assert svc.phase is Phase.WARMING and svc.enter("a", 0.0) is Refusal.WARMING_UP
    svc.ready(1.5)
    svc.ready(2.0)  # once only
    assert isinstance(svc.enter("b", 0.0), Ticket)
    svc.drain()
    assert svc.enter("c", 0.0) is Refusal.DRAINING
    assert [(e["event"], e.get("warmup_s"), e.get("running")) for e in lines(out)] == \
        [("ready", 1.5, None), ("draining", None, 1)]


def test_a_full_queue_is_refused_and_every_refusal_is_logged_with_its_status() -> None:
    svc, out, _ = service(max_batch="1", max_queue="1")
    svc.ready(0.0)
    ticket(svc, "a")
    ticket(svc, "b")
    assert svc.enter("c", 0.0) is Refusal.QUEUE_FULL
    svc.reject("c", Refusal.QUEUE_FULL)
    svc.reject("d", Refusal.BAD_REQUEST)
    assert [(e["request_id"], e["status"], e["reason"]) for e in lines(out)[1:]] == \
        [("c", 429, "queue_full"), ("d", 400, "bad_request")]
    assert svc.counts()["rejected"] == 2


def test_served_lines_and_the_served_counter_always_agree_and_free_the_slot() -> None:
    svc, out, clock = service(max_batch="1", max_queue="4")
    svc.ready(0.0)
    for _ in range(3):
        svc.receive()
    a, b = ticket(svc, "a"), ticket(svc, "b")
    waiting = parse_samples(svc.metrics_text())
    assert (waiting[f"vllm:num_requests_running{{{L}}}"], waiting[f"vllm:num_requests_waiting{{{L}}}"]) == (1, 1)
    clock.now += 0.5
    svc.served(a, Outcome(tokens=4, stream=True, ttft_s=0.1, total_s=0.5, queued_s=0.0))
    assert svc.wait_turn(b) == pytest.approx(0.5)  # b got a's slot at a's finish: no wait here
    svc.abandoned(b, 2, "client gone: BrokenPipeError")
    samples = parse_samples(svc.metrics_text())
    served_lines = [e for e in lines(out) if e["event"] == "served"]
    assert samples[f"firedrill_inference_requests_served_total{{{L}}}"] == len(served_lines) == 1
    assert samples[f"vllm:request_success_total{{{L}}}"] == 1
    assert samples[f"firedrill_inference_requests_received_total{{{L}}}"] == 3
    assert served_lines[0] | {"seq": 0} == {"seq": 0, "ts": served_lines[0]["ts"], "event": "served",
                                            "request_id": "a", "tokens": 4, "stream": True, "ttft_s": 0.1,
                                            "total_s": 0.5, "queued_s": 0.0}
    assert [e["event"] for e in lines(out)][-1] == "aborted"
    assert svc.counts() == {"served": 1, "received": 3, "rejected": 0, "aborted": 1, "unfinished": 0}
    assert svc.wait_idle(0.0)


def test_the_device_hears_compute_when_the_batch_starts_and_idle_when_it_empties(tmp_path: Path) -> None:
    gpu = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    gpu.bind(str(tmp_path / "gpu.sock"))
    gpu.settimeout(5)
    device = Device(str(tmp_path / "gpu.sock"))
    try:
        svc, _, _ = service(device, max_batch="2")
        svc.ready(0.0)
        a, b = ticket(svc, "a"), ticket(svc, "b")
        svc.served(a, Outcome(1, False, 0.1, 0.1, 0.0))
        svc.served(b, Outcome(1, False, 0.1, 0.1, 0.0))
        states = [json.loads(gpu.recv(512))["state"] for _ in range(2)]
        assert states == ["compute", "idle"]
        gpu.setblocking(False)
        with pytest.raises(BlockingIOError):  # one datagram per change, not per request
            gpu.recv(512)
    finally:
        device.close()
        gpu.close()
