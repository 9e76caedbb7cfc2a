"""Ray's state and Job Submission APIs over HTTP, on the cluster's dashboard address.

Every request has a deadline; one the dashboard does not answer, refuses, or answers with what is not the JSON
expected raises :class:`~drills.ray.state.RayError` naming the request, what came back and how to fix the usual
causes (the dashboard not started with ``ray[default]``, ``--dashboard-host`` not reachable from here, a proxy
in the way).  Only the address the profile names is ever contacted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from drills.ray.state import (PlacementGroup, RayActor, RayError, RayJob, RayNode, parse_actors, parse_job,
                              parse_nodes, parse_placement_groups)

__all__ = ["RayDriver"]

REQUEST_TIMEOUT_S = 10.0
LIST_LIMIT = 10_000
"""The most rows one state API list asks for (Ray's own default is 100, too few for a large cluster's actors)."""


@dataclass
class RayDriver:
    """One Ray cluster's dashboard, e.g. ``http://10.0.0.1:8265``."""

    dashboard: str
    timeout: float = REQUEST_TIMEOUT_S
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with every request (a site's auth proxy token, say)."""
    clock: Callable[[], float] = time.monotonic
    """How old a job log read is (``job_logs``' ``max_age``)."""
    _http: httpx.Client | None = field(default=None, init=False, repr=False)
    _logs: dict[str, tuple[float, str]] = field(default_factory=dict, init=False, repr=False)
    """Each job's log as last read, and when the read began."""
    _logs_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.dashboard)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RayError(f"the Ray dashboard address {self.dashboard!r} is not an http(s) URL: write it as "
                           "http://HOST:8265 (ray start --head prints it)")
        self.dashboard = self.dashboard.rstrip("/")

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.dashboard, timeout=self.timeout, headers=dict(self.headers),
                                      trust_env=False)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """``method path`` on the dashboard; the answer's JSON (None for an empty body)."""
        where = f"{method} {self.dashboard}{path}"
        try:
            answer = self.http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise RayError(f"{where}: no answer within {self.timeout:g} s; is the dashboard up and reachable from "
                           "here (ray start --head --dashboard-host)?") from None
        except httpx.HTTPError as exc:
            raise RayError(f"{where}: {exc}; is the Ray head up, and its dashboard (ray[default]) listening "
                           "there?") from None
        if answer.status_code == 404:
            raise RayError(f"{where}: 404 Not Found: the dashboard has no such API (the state and Job APIs need "
                           "Ray 2.x installed as ray[default] on the head)")
        if answer.status_code >= 400:
            raise RayError(f"{where}: {answer.status_code} {answer.text.strip()[:300]}")
        if not answer.content:
            return None
        try:
            return answer.json()
        except ValueError:
            raise RayError(f"{where}: the answer is not JSON ({answer.text.strip()[:120]!r})") from None

    def _list(self, what: str, filters: Mapping[str, str] | None = None) -> Any:
        query = f"detail=1&limit={LIST_LIMIT}"
        for key, value in (filters or {}).items():
            query += f"&filter_keys={quote(key)}&filter_predicates=%3D&filter_values={quote(value)}"
        return self.request("GET", f"/api/v0/{what}?{query}")

    # ------------------------------------------------------------- reads
    def nodes(self) -> list[RayNode]:
        return parse_nodes(self._list("nodes"))

    def actors(self, **filters: str) -> list[RayActor]:
        """Actors, filtered by equality on state API columns (``class_name=...``, ``node_id=...``, ``name=...``)."""
        return parse_actors(self._list("actors", filters))

    def placement_groups(self, **filters: str) -> list[PlacementGroup]:
        return parse_placement_groups(self._list("placement_groups", filters))

    def job(self, submission_id: str) -> RayJob:
        return parse_job(self.request("GET", f"/api/jobs/{quote(submission_id)}"))

    def jobs(self) -> list[RayJob]:
        """Every job the Job Submission API knows (running and finished)."""
        doc = self.request("GET", "/api/jobs/")
        if not isinstance(doc, list):
            raise RayError(f"the Job Submission API's job list is a {type(doc).__name__}, not a list")
        return [parse_job(row) for row in doc if isinstance(row, Mapping)]

    def job_logs(self, submission_id: str, max_age: float = 0.0) -> str:
        """Everything the job's driver and its workers printed so far (Ray forwards the workers' lines).

        The API has no offset: each read is the whole log, which grows for the job's life. With ``max_age`` a
        read by any caller of this driver that began at most that many seconds ago answers again (the invariant
        watch reuses what the drill polling the same job read a moment before); 0 always asks."""
        begun = self.clock()
        if max_age > 0:
            with self._logs_lock:
                read = self._logs.get(submission_id)
            if read is not None and begun - read[0] <= max_age:
                return read[1]
        doc = self.request("GET", f"/api/jobs/{quote(submission_id)}/logs")
        if not isinstance(doc, Mapping) or not isinstance(doc.get("logs"), str):
            raise RayError(f"the logs of job {submission_id} came back without a 'logs' text")
        with self._logs_lock:
            if begun >= self._logs.get(submission_id, (float("-inf"), ""))[0]:
                self._logs[submission_id] = (begun, doc["logs"])
        return doc["logs"]

    # ------------------------------------------------------------- acts
    def submit(self, entrypoint: str, *, submission_id: str | None = None,
               runtime_env: Mapping[str, Any] | None = None, metadata: Mapping[str, str] | None = None) -> str:
        """Submit a job (its driver runs ``entrypoint`` on the head); its submission id."""
        body: dict[str, Any] = {"entrypoint": entrypoint}
        if submission_id:
            body["submission_id"] = submission_id
        if runtime_env:
            body["runtime_env"] = dict(runtime_env)
        if metadata:
            body["metadata"] = dict(metadata)
        doc = self.request("POST", "/api/jobs/", body)
        job = (doc.get("submission_id") or doc.get("job_id")) if isinstance(doc, Mapping) else None
        if not job:
            raise RayError(f"the Job Submission API accepted the job but named no submission id: {doc!r}")
        return str(job)

    def stop(self, submission_id: str) -> bool:
        """Ask the job to stop; whether it was still running. Its last log read is dropped: a run's jobs end here,
        and their whole logs are not kept for the rest of the run."""
        with self._logs_lock:
            self._logs.pop(submission_id, None)
        doc = self.request("POST", f"/api/jobs/{quote(submission_id)}/stop")
        return isinstance(doc, Mapping) and bool(doc.get("stopped"))
