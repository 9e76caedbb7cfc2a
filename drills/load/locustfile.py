"""Locust user classes for load during chaos; locust imports this file in ITS OWN process.

Never import this module from the harness or from tests: ``import locust`` monkey-patches the whole process
with gevent, which deadlocks any blocking call gevent does not patch (an embedded server, ``os.system``).
``drills.load.run`` starts ``python -m locust -f <this file> --headless ...`` as a subprocess instead, and the
import-linter contract in pyproject.toml keeps ``locust`` out of every other module.

Locust imports this file as a top-level module (not as ``drills.load.locustfile``), so it stands alone: locust,
the official ``kubernetes`` client and the standard library only.

Every request, whatever its outcome, writes ONE JSON line to the file named by ``FIREDRILL_LOAD_SAMPLES``
(docs/LOAD.md, "Samples"): request id, kind, start (wall and monotonic clock: CLOCK_MONOTONIC is system-wide,
so the harness lines samples up with its own fault instants), time to first token, end, status, outcome, error.
The outcome is ``answered`` (a whole answer), ``failed`` (the server answered with a refusal or an error
status) or ``lost`` (sent, never answered: refused or reset connection, a stream cut before its end, a timeout).

Environment (all optional except where said):
  FIREDRILL_LOAD_SAMPLES     samples file (JSON lines, appended); required
  FIREDRILL_LOAD_RUN_ID      prefix of every request id (default: a random one)
  FIREDRILL_LOAD_WAIT_S      seconds each user waits between its requests (default 0)
  FIREDRILL_LOAD_TIMEOUT_S   per-request socket timeout in seconds (default 30)
  FIREDRILL_LOAD_MODEL, FIREDRILL_LOAD_PROMPT, FIREDRILL_LOAD_MAX_TOKENS   the completion asked for
  FIREDRILL_LOAD_KUBECONFIG  kubeconfig of the control-plane user (required by ControlPlaneUser)
  FIREDRILL_LOAD_NAMESPACE   namespace the control-plane user writes in (default "default")
  FIREDRILL_LOAD_OBJECT      "configmap" (default) or "pod" (a pod no node can take: it stays Pending)
  FIREDRILL_LOAD_RETRIES     the inference client's retry policy: how many times a request REFUSED before the
                             server accepted it is sent again (default 0). Refused: the connection failed or
                             closed before a status line, or the status was 429 or 503 (a full queue, a draining
                             replica). A stream cut after its status line is never retried: the user saw part
                             of an answer. The sample keeps the first attempt's start, so TTFT and latency
                             include every retry.
  FIREDRILL_LOAD_RETRY_BACKOFF_S  seconds before each retry (default 0.1)
  FIREDRILL_LOAD_KEEPALIVE   "1" (default): each inference user keeps one connection, as one OpenAI client does;
                             "0": each request opens its own, as requests from many end users do, so a load
                             balancer can send each one to any replica (a new one included)
"""

from __future__ import annotations

import http.client
import json
import os
import select
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from locust import User, constant, events, task

SAMPLES_ENV = "FIREDRILL_LOAD_SAMPLES"
RUN_ID = os.environ.get("FIREDRILL_LOAD_RUN_ID") or uuid.uuid4().hex[:8]
WAIT_S = float(os.environ.get("FIREDRILL_LOAD_WAIT_S", "0"))
TIMEOUT_S = float(os.environ.get("FIREDRILL_LOAD_TIMEOUT_S", "30"))
RETRIES = int(os.environ.get("FIREDRILL_LOAD_RETRIES", "0"))
RETRY_BACKOFF_S = float(os.environ.get("FIREDRILL_LOAD_RETRY_BACKOFF_S", "0.1"))
KEEPALIVE = os.environ.get("FIREDRILL_LOAD_KEEPALIVE", "1") != "0"
REFUSED_STATUSES = (429, 503)
"""Statuses that say the server did not take the request on (queue full, draining): retried by the policy."""

_samples: Any = None
_environment: Any = None


@events.init.add_listener
def _open_samples(environment: Any, **_: Any) -> None:
    """Open the samples file once per locust process, line-buffered, so the harness can follow it live."""
    global _samples, _environment
    path = os.environ.get(SAMPLES_ENV)
    if not path:
        raise SystemExit(f"{SAMPLES_ENV} is not set: the load generator needs a file for its per-request samples")
    _samples = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (closed when locust quits)
    _environment = environment


@events.quit.add_listener
def _close_samples(**_: Any) -> None:
    """After every user stopped (``quit`` comes after the runner quit; ``quitting`` comes before, while users
    told to stop by SIGTERM may still finish a request): close the samples, and write the exceptions a task
    raised (a bug here, never a request's outcome, which every task catches) to ``<samples>.errors.json`` so the
    harness refuses the run instead of returning counts that miss requests."""
    if _samples is not None:
        _samples.close()
    runner = getattr(_environment, "runner", None)
    errors = [{"count": e.get("count", 1), "msg": e.get("msg", ""), "traceback": e.get("traceback", "")}
              for e in (getattr(runner, "exceptions", None) or {}).values()]
    if errors:
        with open(os.environ[SAMPLES_ENV] + ".errors.json", "w", encoding="utf-8") as f:
            json.dump(errors, f)


def _unfinished(sample: "Sample") -> None:
    """In a task's ``finally``: a request neither answered nor refused was lost, and this says why (the run
    stopping the user mid-request raises GreenletExit; anything else is a bug, also reported by locust).

    A request the run's stop caught before it was on the wire was never sent: locust kills a user that was
    waiting between tasks, and a user that had just woken may already have begun its next task, so the kill
    lands in its connect. Such a request is not written down (not sent, so not lost either) and not reported
    to locust, so locust's total still counts exactly the requests the server could have seen."""
    if sample.done:
        return
    exc = sys.exc_info()[1]
    stopped = exc is None or type(exc).__name__ == "GreenletExit"
    if stopped and not sample.on_wire:
        sample.done = True
        return
    sample.finish("lost", None, "the load run ended before an answer" if stopped else f"{type(exc).__name__}: {exc}")


def new_request_id(kind: str) -> str:
    return f"{RUN_ID}-{kind}-{uuid.uuid4().hex[:16]}"


class Sample:
    """One request as it happens; :meth:`finish` reports it to locust and writes its JSON line, once."""

    def __init__(self, environment: Any, kind: str, request_type: str, name: str, request_id: str = "") -> None:
        self.environment, self.kind, self.request_type, self.name = environment, kind, request_type, name
        self.request_id = request_id or new_request_id(kind)
        self.start_wall, self.start_mono = time.time(), time.monotonic()
        self.ttft_s: float | None = None
        self.extra: dict[str, Any] = {}
        self.done = False
        self.on_wire = False
        """Whether the request was handed to the connection (its bytes written), so the server may have seen it."""

    def first_chunk(self) -> None:
        if self.ttft_s is None:
            self.ttft_s = time.monotonic() - self.start_mono

    def finish(self, outcome: str, status: int | None, error: str | None, length: int = 0) -> None:
        if self.done:
            return
        self.done = True
        end_mono = time.monotonic()
        line = {"request_id": self.request_id, "kind": self.kind, "start_wall": self.start_wall,
                "start_mono": self.start_mono, "ttft_s": self.ttft_s, "end_mono": end_mono,
                "latency_s": end_mono - self.start_mono, "status": status, "outcome": outcome, "error": error,
                **self.extra}
        if _samples is not None:
            _samples.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.environment.events.request.fire(
            request_type=self.request_type, name=self.name, response_time=(end_mono - self.start_mono) * 1000.0,
            response_length=length, exception=None if outcome == "answered" else RuntimeError(error or outcome),
            context={"request_id": self.request_id})


class InferenceUser(User):
    """Streams OpenAI-style completions (``POST /v1/completions``, ``stream: true``) and times the first
    Server-Sent Event chunk (TTFT) and the ``data: [DONE]`` line (latency); one keep-alive connection per user."""

    wait_time = constant(WAIT_S)

    def on_start(self) -> None:
        url = urlsplit(self.host or "")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise SystemExit(f"--host {self.host!r} is not an http(s) URL of the inference service")
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(url.hostname, url.port, timeout=TIMEOUT_S)
        self.path = (url.path.rstrip("/") or "") + "/v1/completions"
        self.body = json.dumps({"model": os.environ.get("FIREDRILL_LOAD_MODEL", "firedrill-canary"),
                                "prompt": os.environ.get("FIREDRILL_LOAD_PROMPT", "Say hello."),
                                "max_tokens": int(os.environ.get("FIREDRILL_LOAD_MAX_TOKENS", "16")),
                                "stream": True}).encode()

    def on_stop(self) -> None:
        self.conn.close()

    def _drop_if_closed(self) -> None:
        """An idle keep-alive connection the server (or a load balancer) closed reads as EOF: close it here so
        http.client opens a fresh one, instead of sending into it and counting a request the server never saw
        as lost (urllib3 checks its pooled connections the same way)."""
        sock = self.conn.sock
        if sock is None:
            return
        try:
            readable = select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            readable = [sock]
        if readable:
            self.conn.close()

    def _send(self, sample: "Sample") -> Any:
        """Send the request under the retry policy (FIREDRILL_LOAD_RETRIES): the 200 response to stream, or
        None once the sample is finished (failed or lost after the last attempt)."""
        attempt = 0
        while True:
            attempt += 1
            sample.extra["attempts"] = attempt
            self._drop_if_closed()
            try:
                if self.conn.sock is None:
                    self.conn.connect()  # a stop arriving here finds the request not yet sent
                sample.on_wire = True
                self.conn.request("POST", self.path, body=self.body, headers={
                    "Content-Type": "application/json", "Accept": "text/event-stream",
                    "X-Request-Id": sample.request_id})
                resp = self.conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self.conn.close()
                if attempt <= RETRIES:
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                sample.finish("lost", None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                return None
            if resp.status == 200:
                return resp
            detail = resp.read()[:200].decode("utf-8", "replace")
            if resp.will_close:
                self.conn.close()
            if resp.status in REFUSED_STATUSES and attempt <= RETRIES:
                time.sleep(RETRY_BACKOFF_S)
                continue
            sample.finish("failed", resp.status, f"HTTP {resp.status}: {detail}")
            return None

    @task
    def completion(self) -> None:
        sample = Sample(self.environment, "inference", "POST", "/v1/completions")
        try:
            resp = self._send(sample)
            if resp is None:
                return
            chunks, length, done = 0, 0, False
            while True:
                line = resp.readline()
                if not line:
                    break
                length += len(line)
                if not line.startswith(b"data:"):
                    continue
                if line[5:].strip() == b"[DONE]":
                    done = True
                    break
                sample.first_chunk()
                chunks += 1
            resp.read()  # the rest of the body, so the connection can carry the next request
            if not KEEPALIVE:
                self.conn.close()
            sample.extra["chunks"] = chunks
            if done:
                sample.finish("answered", resp.status, None, length)
            else:
                sample.finish("lost", resp.status, f"stream ended after {chunks} chunks without data: [DONE]",
                              length)
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            sample.finish("lost", None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        finally:
            if not sample.done:  # the run stopped this user mid-request: sent, never answered
                self.conn.close()
                _unfinished(sample)


class ControlPlaneUser(User):
    """Creates, updates, lists and watches objects through the official ``kubernetes`` client, as a tenant's
    tooling does; one object per create, later updated by the same user. The watch task reads its own fresh
    write back through a watch from the resourceVersion of a list taken just before it."""

    wait_time = constant(WAIT_S)

    def on_start(self) -> None:
        from kubernetes import client, config

        path = os.environ.get("FIREDRILL_LOAD_KUBECONFIG")
        if not path:
            raise SystemExit("FIREDRILL_LOAD_KUBECONFIG is not set: the control-plane user needs a kubeconfig")
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=cfg)
        self.client_module = client
        self.api = client.CoreV1Api(client.ApiClient(cfg))
        self.namespace = os.environ.get("FIREDRILL_LOAD_NAMESPACE", "default")
        self.object = os.environ.get("FIREDRILL_LOAD_OBJECT", "configmap")
        if self.object not in ("configmap", "pod"):
            raise SystemExit(f"FIREDRILL_LOAD_OBJECT={self.object!r}: expected configmap or pod")
        self.mine: list[str] = []

    def _body(self, name: str, revision: int) -> dict[str, Any]:
        meta = {"name": name, "labels": {"firedrill.dev/load": RUN_ID},
                "annotations": {"firedrill.dev/revision": str(revision)}}
        if self.object == "configmap":
            return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"revision": str(revision)}}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"nodeSelector": {"firedrill.dev/load": "never-scheduled"},
                         "containers": [{"name": "main", "image": "firedrill/none:0"}]}}

    def _call(self, op: str, fn: Any, *args: Any, object_name: str | None = None, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        sample = Sample(self.environment, f"k8s-{op}", "K8S", f"{op} {self.object}")
        sample.on_wire = True  # the client's connection pool hides when it sends: count it sent from the start
        if object_name:
            sample.extra["object"] = object_name
        try:
            result = fn(*args, _request_timeout=TIMEOUT_S, **kwargs)
            rv = getattr(getattr(result, "metadata", None), "resource_version", None)
            if rv:
                sample.extra["resource_version"] = rv
            sample.finish("answered", 201 if op == "create" else 200, None)
            return result
        except ApiException as exc:
            outcome = "lost" if exc.status in (0, None) else "failed"
            sample.finish(outcome, exc.status or None, f"HTTP {exc.status}: {exc.reason}")
        except Exception as exc:  # noqa: BLE001 (urllib3 raises its own errors, not OSError, on a reset)
            sample.finish("lost", None, f"{type(exc).__name__}: {exc}")
        finally:
            _unfinished(sample)
        return None

    def _fns(self) -> tuple[Any, Any, Any]:
        if self.object == "configmap":
            return (self.api.create_namespaced_config_map, self.api.replace_namespaced_config_map,
                    self.api.list_namespaced_config_map)
        return self.api.create_namespaced_pod, self.api.patch_namespaced_pod, self.api.list_namespaced_pod

    @task(3)
    def create(self) -> None:
        name = f"load-{RUN_ID}-{uuid.uuid4().hex[:10]}"
        if self._call("create", self._fns()[0], self.namespace, self._body(name, 1), object_name=name) is not None:
            self.mine.append(name)

    @task(2)
    def update(self) -> None:
        if not self.mine:
            return self.create()
        name = self.mine[-1]
        body = self._body(name, int(time.monotonic() * 1000))
        if self.object == "pod":
            body = {"metadata": {"annotations": body["metadata"]["annotations"]}}
        self._call("update", self._fns()[1], name, self.namespace, body, object_name=name)
        return None

    @task(2)
    def list_objects(self) -> None:
        self._call("list", self._fns()[2], self.namespace, label_selector=f"firedrill.dev/load={RUN_ID}")

    @task(1)
    def watch(self) -> None:
        """List, write one object, then watch from the list's resourceVersion until that object's ADDED event:
        the sample's latency is the time the watch took to deliver an acknowledged write."""
        from kubernetes import watch

        listed = self._call("list", self._fns()[2], self.namespace, label_selector=f"firedrill.dev/load={RUN_ID}",
                            limit=1)
        if listed is None:
            return
        name = f"load-{RUN_ID}-{uuid.uuid4().hex[:10]}"
        if self._call("create", self._fns()[0], self.namespace, self._body(name, 1), object_name=name) is None:
            return
        self.mine.append(name)
        sample = Sample(self.environment, "k8s-watch", "K8S", f"watch {self.object}")
        sample.on_wire = True
        sample.extra["object"] = name
        w = watch.Watch()
        try:
            for event in w.stream(self._fns()[2], self.namespace, resource_version=listed.metadata.resource_version,
                                  field_selector=f"metadata.name={name}", timeout_seconds=int(TIMEOUT_S),
                                  _request_timeout=TIMEOUT_S):
                obj = event.get("object")
                if getattr(getattr(obj, "metadata", None), "name", None) == name:
                    sample.first_chunk()
                    sample.finish("answered", 200, None)
                    break
            else:
                sample.finish("lost", None, f"the watch ended without the ADDED event of {name}")
        except Exception as exc:  # noqa: BLE001 (an ApiException or urllib3 error both mean no event)
            status = getattr(exc, "status", None)
            sample.finish("failed" if status else "lost", status or None, f"{type(exc).__name__}: {exc}")
        finally:
            w.stop()
            _unfinished(sample)
