"""The inference canary as a real process on loopback, driven by real HTTP clients from threads (issue 14, item 1).

``python -m drills.inference serve --port 0 --port-file ...``; a thread reads its JSON lines from the stdout pipe,
and every wait is on a logged line or a scraped metric with a deadline.  Checked: warm-up answers 503; requests
stream and answer with every token, none before the configured time to first token; the batch and the queue fill
and the next request gets 429; SIGTERM drains (503 for newcomers, admitted streams finish) and exits 143; and the
served counter of /metrics, the ``served`` log lines and the clients' successes are the same number.  Only
processes this module started are ever signalled.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 15.0
MODEL = 'model_name="canary-test"'
Line = dict[str, Any]


class Canary:
    """One inference canary process, its port, and the lines it logged so far."""

    def __init__(self, workdir: Path, *flags: str) -> None:
        self.port_file = workdir / "port"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("POD_IP", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "drills.inference", "serve", "--port", "0", "--port-file", str(self.port_file),
             "--model", "canary-test", *flags],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        self.lines: list[Line] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = self._wait_port()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _wait_port(self) -> int:
        deadline = time.monotonic() + DEADLINE
        while not self.port_file.exists():
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before listening"
            assert time.monotonic() < deadline, "no port file"
            time.sleep(0.01)
        text = self.port_file.read_text()
        assert text.endswith("\n")
        return int(text)

    def wait_for(self, event: str, where: Callable[[Line], bool] = lambda line: True) -> Line:
        deadline = time.monotonic() + DEADLINE
        with self._cond:
            while True:
                for line in self.lines:
                    if line["event"] == event and where(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(f"no {event!r} line in {DEADLINE} s; last lines: {self.lines[-5:]}")
                self._cond.wait(min(left, 0.5))

    def events(self, event: str) -> list[Line]:
        with self._cond:
            return [line for line in self.lines if line["event"] == event]

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def metrics(self) -> dict[str, float]:
        status, body = self.get("/metrics")
        assert status == 200
        return {key: float(value) for key, _, value in
                (line.rpartition(" ") for line in body.decode().splitlines() if line and not line.startswith("#"))}

    def metric_until(self, check: Callable[[dict[str, float]], bool]) -> dict[str, float]:
        deadline = time.monotonic() + DEADLINE
        while True:
            samples = self.metrics()
            if check(samples):
                return samples
            assert time.monotonic() < deadline, f"metrics never matched: {samples}"
            time.sleep(0.02)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@dataclass
class Reply:
    """What one client saw."""

    request_id: str
    status: int
    ttft: float = 0.0
    """Seconds from sending to the first token (stream: the first event; otherwise the whole answer)."""
    texts: list[str] = field(default_factory=list)
    finish: list[str | None] = field(default_factory=list)
    done: bool = False
    body: dict[str, Any] = field(default_factory=dict)

    def ok(self, tokens: int) -> bool:
        want = [f" tok{i}" for i in range(tokens)]
        if self.status != 200:
            return False
        if self.done:
            return self.texts == want and self.finish == [None] * (tokens - 1) + ["length"]
        return self.body.get("choices", [{}])[0].get("text") == "".join(want)


def complete(port: int, request_id: str, stream: bool, max_tokens: int) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
    body = json.dumps({"model": "any", "prompt": "say something", "max_tokens": max_tokens, "stream": stream})
    try:
        sent = time.monotonic()
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json", "X-Request-Id": request_id})
        resp = conn.getresponse()
        reply = Reply(request_id, resp.status)
        if resp.status != 200 or not stream:
            reply.body = json.loads(resp.read())
            reply.ttft = time.monotonic() - sent
            return reply
        assert resp.getheader("Content-Type") == "text/event-stream"
        while True:
            line = resp.readline()
            if not line:
                return reply  # cut short: done stays False
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                reply.done = True
                resp.read()
                return reply
            if not reply.texts:
                reply.ttft = time.monotonic() - sent
            choice = json.loads(line[6:])["choices"][0]
            reply.texts.append(choice["text"])
            reply.finish.append(choice["finish_reason"])
    finally:
        conn.close()


@pytest.fixture()
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="inf") as d:  # short: a UNIX socket path has ~100 characters
        yield Path(d)


def test_warm_up_answers_503_then_the_canary_serves(workdir: Path) -> None:
    canary = Canary(workdir, "--warmup-seconds", "3", "--ttft-seconds", "0.01", "--tpot-seconds", "0")
    try:
        listening = canary.wait_for("listening")
        assert (listening["host"], listening["port"]) == ("127.0.0.1", canary.port)
        status, body = canary.get("/health")
        assert (status, json.loads(body)) == (503, {"status": "warming"})
        early = complete(canary.port, "early", stream=False, max_tokens=2)
        assert early.status == 503 and early.body["error"]["code"] == "warming_up"
        assert canary.events("ready") == []
        ready = canary.wait_for("ready")
        assert ready["warmup_s"] >= 3.0
        status, body = canary.get("/health")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        assert complete(canary.port, "late", stream=True, max_tokens=2).ok(2)
        assert canary.stop() == 143
        rejected = canary.events("rejected")
        assert [(r["request_id"], r["status"], r["reason"]) for r in rejected] == [("early", 503, "warming_up")]
        assert canary.events("exit")[0] | {"seq": 0, "ts": ""} == {
            "seq": 0, "ts": "", "event": "exit", "code": 143, "reason": "sigterm", "served": 1, "received": 2,
            "rejected": 1, "aborted": 0, "unfinished": 0, "message": "drained"}
    finally:
        canary.close()


def test_a_client_that_leaves_mid_stream_is_logged_aborted_and_frees_its_slot(workdir: Path) -> None:
    canary = Canary(workdir, "--ttft-seconds", "0.01", "--tpot-seconds", "0.05", "--max-batch", "1",
                    "--max-queue", "0")
    try:
        canary.wait_for("ready")
        conn = http.client.HTTPConnection("127.0.0.1", canary.port, timeout=DEADLINE)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "p", "max_tokens": 200, "stream": True}),
                     headers={"X-Request-Id": "leaver"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.readline().startswith(b"data: ")
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)  # gone after the first token, 199 unsent
        conn.close()
        aborted = canary.wait_for("aborted")
        assert aborted["request_id"] == "leaver" and 1 <= aborted["tokens"] < 200
        assert complete(canary.port, "next", stream=False, max_tokens=3).ok(3)  # the one slot is free again
        assert canary.stop() == 143
        assert canary.events("exit")[0]["aborted"] == 1 and canary.events("exit")[0]["served"] == 1
        assert [line["request_id"] for line in canary.events("served")] == ["next"]
    finally:
        canary.close()


def test_load_is_paced_bounded_counted_and_drained(workdir: Path) -> None:
    ttft, tpot, tokens = 0.3, 0.05, 20
    gpu_path = workdir / "gpu.sock"
    gpu = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    gpu.bind(str(gpu_path))
    gpu.settimeout(0.2)
    states: list[str] = []
    listening = threading.Event()

    def hear() -> None:
        while not listening.is_set():
            try:
                states.append(json.loads(gpu.recv(512))["state"])
            except TimeoutError:
                continue
            except OSError:
                return

    listener = threading.Thread(target=hear, daemon=True)
    listener.start()
    canary = Canary(workdir, "--ttft-seconds", str(ttft), "--tpot-seconds", str(tpot), "--max-batch", "2",
                    "--max-queue", "2", "--device-socket", str(gpu_path))
    pool = ThreadPoolExecutor(max_workers=8)
    try:
        canary.wait_for("ready")
        # Two run and two wait (streaming and not); the fifth finds the queue full.
        first: list[Future[Reply]] = [pool.submit(complete, canary.port, f"a{i}", i % 2 == 0, tokens)
                                      for i in range(4)]
        canary.metric_until(lambda m: (m[f"vllm:num_requests_running{{{MODEL}}}"],
                                       m[f"vllm:num_requests_waiting{{{MODEL}}}"]) == (2, 2))
        refused = complete(canary.port, "full", stream=True, max_tokens=tokens)
        assert refused.status == 429 and refused.body["error"]["type"] == "rate_limit_error"
        replies = [f.result(timeout=DEADLINE) for f in first]
        assert all(r.ok(tokens) for r in replies), replies
        assert all(r.ttft >= ttft for r in replies), [r.ttft for r in replies]
        for reply in replies:  # a client can read its last token a moment before the line is written and read here
            canary.wait_for("served", lambda line, rid=reply.request_id: line["request_id"] == rid)
        served = {line["request_id"]: line for line in canary.events("served")}
        assert sorted(served) == ["a0", "a1", "a2", "a3"]
        queued = sorted(served.values(), key=lambda line: line["queued_s"])
        assert [line["queued_s"] > 0.5 for line in queued] == [False, False, True, True]
        for line in served.values():
            assert line["tokens"] == tokens and line["ttft_s"] >= line["queued_s"] + ttft - 1e-6  # 6 decimals
            assert line["total_s"] >= line["queued_s"] + ttft + (tokens - 1) * tpot - 1e-6  # tokens on a fixed beat
        canary.wait_for("rejected")
        assert [(r["request_id"], r["status"], r["reason"]) for r in canary.events("rejected")] == \
            [("full", 429, "queue_full")]
        m = canary.metric_until(lambda m: m[f"firedrill_inference_requests_served_total{{{MODEL}}}"] == 4)
        assert m[f"firedrill_inference_requests_served_total{{{MODEL}}}"] == len(canary.events("served")) == \
            sum(r.ok(tokens) for r in replies)
        assert m[f"vllm:request_success_total{{{MODEL}}}"] == 4
        assert m[f"firedrill_inference_requests_received_total{{{MODEL}}}"] == 5
        assert m[f"vllm:time_to_first_token_seconds_count{{{MODEL}}}"] == 4
        assert m[f'vllm:time_to_first_token_seconds_bucket{{{MODEL},le="0.25"}}'] == 0  # none before --ttft
        assert m[f"vllm:time_per_output_token_seconds_count{{{MODEL}}}"] == 4 * (tokens - 1)

        # SIGTERM with two streams running and one waiting: newcomers get 503, all three finish, exit 143.
        last: list[Future[Reply]] = [pool.submit(complete, canary.port, f"d{i}", True, tokens) for i in range(3)]
        canary.metric_until(lambda m: (m[f"vllm:num_requests_running{{{MODEL}}}"],
                                       m[f"vllm:num_requests_waiting{{{MODEL}}}"]) == (2, 1))
        canary.proc.send_signal(signal.SIGTERM)
        assert (canary.wait_for("draining")["running"], canary.events("draining")[0]["waiting"]) == (2, 1)
        late = complete(canary.port, "late", stream=True, max_tokens=tokens)
        assert late.status == 503 and late.body["error"]["code"] == "draining"
        assert canary.get("/health")[0] == 503
        drained = [f.result(timeout=DEADLINE) for f in last]
        assert all(r.ok(tokens) and r.done for r in drained), drained
        assert canary.stop() == 143
        exit_line = canary.events("exit")[0]
        successes = sum(r.ok(tokens) for r in replies + drained)
        assert exit_line["served"] == len(canary.events("served")) == successes == 7
        assert (exit_line["received"], exit_line["rejected"], exit_line["unfinished"]) == (9, 2, 0)
        assert [line["event"] for line in canary.lines][-1] == "exit"
        assert canary.events("served")[-1]["seq"] < exit_line["seq"]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        canary.close()
        listening.set()
        listener.join(timeout=5)
        gpu.close()
    # idle at start; compute from the first admission until the batch empties (a waiting request takes a freed
    # slot in the same step, so no idle between); the same for the drained three; idle again before exit.
    assert states == ["idle", "compute", "idle", "compute", "idle", "idle"], states
