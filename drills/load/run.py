"""Start locust headless in its own process, wait for it, and read what it measured (docs/LOAD.md).

The harness never imports locust (it monkey-patches the whole process with gevent); it runs
``python -m locust -f drills/load/locustfile.py --headless ...`` as a subprocess and reads back two things:
the per-request samples the locust process wrote (JSON lines, the source of every count and percentile here)
and locust's own CSV totals, kept beside them so the two can be compared.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from drills.errors import FiredrillError

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
STARTUP_GRACE_S = 30.0
"""How long locust may take beyond the run's own duration and stop timeout (start-up, writing its files)."""


class LoadError(FiredrillError):
    """The load generator could not run or its output could not be read: locust missing, the target unreachable,
    locust exiting with an error, or a samples line that is not what the locustfile writes."""


class LoadUser(Enum):
    """A locust user class of ``drills/load/locustfile.py``."""

    INFERENCE = "InferenceUser"
    """Streams completions from the inference service (``--host``) and times the first token."""
    CONTROL_PLANE = "ControlPlaneUser"
    """Creates, updates, lists and watches objects through the official kubernetes client."""


class Outcome(Enum):
    """What became of one request."""

    ANSWERED = "answered"
    """A whole answer came back (the stream's ``data: [DONE]``, or the API's success status)."""
    FAILED = "failed"
    """The server answered with a refusal or an error status (429, 503, 5xx, an API error)."""
    LOST = "lost"
    """Sent and never answered: connection refused or reset, a stream cut short, a timeout, the run's end."""


@dataclass(frozen=True)
class Sample:
    """One request as the locust process saw it. Monotonic times are CLOCK_MONOTONIC, shared by every process on
    the machine, so they line up with the harness's own ``time.monotonic()`` fault instants."""

    request_id: str
    kind: str
    """``inference``, or ``k8s-create`` / ``k8s-update`` / ``k8s-list`` / ``k8s-watch``."""
    start_wall: float
    start_mono: float
    end_mono: float
    latency_s: float
    outcome: Outcome
    status: int | None = None
    ttft_s: float | None = None
    """Time to the first streamed chunk (inference) or to the watch event (``k8s-watch``); None otherwise."""
    error: str | None = None
    object_name: str | None = None
    """The object a control-plane write or watch named."""
    attempts: int = 1
    """How many times the request was sent under the client's retry policy (``LoadSpec.retries``)."""


@dataclass(frozen=True)
class Totals:
    """Counts of requests; ``lost = sent - answered - failed``."""

    sent: int
    answered: int
    failed: int

    @property
    def lost(self) -> int:
        return self.sent - self.answered - self.failed

    @property
    def error_rate(self) -> float:
        """Share of sent requests not answered (failed or lost); 0 when nothing was sent."""
        return (self.sent - self.answered) / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles in seconds (each one a value that was measured), over ``count`` values."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float


@dataclass(frozen=True)
class KindSummary:
    """Totals and percentiles of one kind of request; percentiles are over answered requests only."""

    kind: str
    totals: Totals
    latency: Percentiles | None
    ttft: Percentiles | None


@dataclass(frozen=True)
class LocustCsv:
    """The ``Aggregated`` row of locust's ``<prefix>_stats.csv`` (milliseconds). Locust rewrites this file once a
    second while it runs and does not rewrite it at shutdown, so its counts can miss the last second and the
    requests users finish during --stop-timeout: the totals come from the JSON file, written at shutdown."""

    requests: int
    failures: int
    median_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    requests_per_s: float


@dataclass(frozen=True)
class LocustTotals:
    """Locust's own numbers: request and failure totals from its ``--json-file`` (written after every user
    stopped), its CSV aggregate beside them."""

    requests: int
    failures: int
    csv: LocustCsv


@dataclass(frozen=True)
class LoadSpec:
    """What to run: which users, how many, how long, against what."""

    host: str
    """Base URL of the inference service (``http://127.0.0.1:8000``); for control-plane-only runs any URL
    (locust requires one), the API server comes from ``kubeconfig``."""
    out_dir: Path
    users: int = 4
    spawn_rate: float = 4.0
    duration_s: float = 5.0
    user_classes: tuple[LoadUser, ...] = (LoadUser.INFERENCE,)
    wait_s: float = 0.0
    """Seconds each user waits between its requests (0: closed loop, the next request as soon as one ends)."""
    stop_timeout_s: float = 10.0
    """At the end of the run each user finishes the request it is in, up to this long (locust --stop-timeout)."""
    request_timeout_s: float = 30.0
    model: str = "firedrill-canary"
    prompt: str = "Say hello."
    max_tokens: int = 16
    kubeconfig: Path | None = None
    namespace: str = "default"
    k8s_object: str = "configmap"
    """``configmap`` or ``pod`` (a pod no node can take, so it stays Pending)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    """Prefix of every request id and label of every object this run writes."""
    retries: int = 0
    """The inference client's retry policy: a request refused before the server accepted it (connection failed
    or closed before a status line, or 429/503) is sent again up to this many times; a stream cut short is
    never retried (docs/LOAD.md)."""
    retry_backoff_s: float = 0.1
    keep_alive: bool = True
    """Each inference user keeps one connection (True, as one OpenAI client does), or opens one per request
    (False, as requests from many end users do: a load balancer can then send each to any replica)."""

    def __post_init__(self) -> None:
        if self.users < 1:
            raise LoadError(f"load users={self.users}: need at least 1")
        if self.spawn_rate <= 0 or self.duration_s <= 0:
            raise LoadError(f"load spawn_rate={self.spawn_rate}, duration_s={self.duration_s}: both must be > 0")
        if not self.user_classes:
            raise LoadError("load user_classes is empty: name InferenceUser, ControlPlaneUser or both")
        if LoadUser.CONTROL_PLANE in self.user_classes and self.kubeconfig is None:
            raise LoadError("the control-plane user needs a kubeconfig (LoadSpec.kubeconfig)")
        if self.k8s_object not in ("configmap", "pod"):
            raise LoadError(f"load k8s_object={self.k8s_object!r}: expected configmap or pod")
        if self.retries < 0 or self.retry_backoff_s < 0:
            raise LoadError(f"load retries={self.retries}, retry_backoff_s={self.retry_backoff_s}: both must be >= 0")

    @property
    def samples_path(self) -> Path:
        return self.out_dir / "samples.jsonl"

    @property
    def csv_prefix(self) -> Path:
        return self.out_dir / "locust"


@dataclass(frozen=True)
class LoadResult:
    """What a finished run measured: counts and percentiles from the samples, locust's own totals beside them."""

    spec: LoadSpec
    samples: tuple[Sample, ...]
    totals: Totals
    by_kind: tuple[KindSummary, ...]
    locust: LocustTotals
    exit_code: int
    wall_s: float
    command: tuple[str, ...]

    def kind(self, kind: str) -> KindSummary | None:
        return next((k for k in self.by_kind if k.kind == kind), None)


# --- pure parts -------------------------------------------------------------------------------------------------


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) by nearest rank: the smallest value with at least q % of the values at
    or below it. Every answer is a value that was measured."""
    if not values:
        raise LoadError("no values to take a percentile of")
    if not 0 < q <= 100:
        raise LoadError(f"percentile {q}: expected 0 < q <= 100")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def percentiles(values: Sequence[float]) -> Percentiles | None:
    if not values:
        return None
    return Percentiles(len(values), nearest_rank(values, 50), nearest_rank(values, 95), nearest_rank(values, 99),
                       max(values))


def _number(obj: dict[str, Any], key: str, where: str, optional: bool = False) -> float | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LoadError(f"{where}: {key!r} is {value!r}, expected a number")
    return float(value)


def parse_sample(line: str, where: str = "samples") -> Sample:
    """One JSON line written by the locustfile; a line that is not one names ``where`` (file:line) and why."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LoadError(f"{where}: not a JSON line ({exc.msg}): {line[:120]!r}") from None
    if not isinstance(obj, dict):
        raise LoadError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("request_id", "kind"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise LoadError(f"{where}: {key!r} is {obj.get(key)!r}, expected a non-empty string")
    try:
        outcome = Outcome(obj.get("outcome"))
    except ValueError:
        raise LoadError(f"{where}: outcome {obj.get('outcome')!r} is not one of "
                        f"{', '.join(o.value for o in Outcome)}") from None
    status = obj.get("status")
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
        raise LoadError(f"{where}: 'status' is {status!r}, expected an integer or null")
    start_mono = _number(obj, "start_mono", where)
    end_mono = _number(obj, "end_mono", where)
    assert start_mono is not None and end_mono is not None
    if end_mono < start_mono:
        raise LoadError(f"{where}: end_mono {end_mono} is before start_mono {start_mono}")
    return Sample(request_id=obj["request_id"], kind=obj["kind"], start_wall=_number(obj, "start_wall", where) or 0.0,
                  start_mono=start_mono, end_mono=end_mono, latency_s=end_mono - start_mono, outcome=outcome,
                  status=status, ttft_s=_number(obj, "ttft_s", where, optional=True),
                  error=obj.get("error") if isinstance(obj.get("error"), str) else None,
                  object_name=obj.get("object") if isinstance(obj.get("object"), str) else None,
                  attempts=obj["attempts"] if isinstance(obj.get("attempts"), int) and obj["attempts"] >= 1 else 1)


def parse_samples(text: str, source: str = "samples") -> tuple[Sample, ...]:
    """Every sample of a samples file's text, in the order written. A last line without its newline is a write
    cut short (the file is read while locust may still write) and is skipped; any other bad line is an error."""
    lines = text.split("\n")
    complete, tail = lines[:-1], lines[-1]
    del tail  # an unterminated last line is still being written
    return tuple(parse_sample(line, f"{source}:{n}") for n, line in enumerate(complete, 1) if line.strip())


def totals(samples: Iterable[Sample]) -> Totals:
    items = list(samples)
    return Totals(sent=len(items), answered=sum(s.outcome is Outcome.ANSWERED for s in items),
                  failed=sum(s.outcome is Outcome.FAILED for s in items))


def summarize(samples: Sequence[Sample]) -> tuple[KindSummary, ...]:
    """Per kind, in first-seen order: totals and the percentiles of answered requests' latency and TTFT."""
    kinds: dict[str, list[Sample]] = {}
    for s in samples:
        kinds.setdefault(s.kind, []).append(s)
    out = []
    for kind, items in kinds.items():
        answered = [s for s in items if s.outcome is Outcome.ANSWERED]
        out.append(KindSummary(kind, totals(items), percentiles([s.latency_s for s in answered]),
                               percentiles([s.ttft_s for s in answered if s.ttft_s is not None])))
    return tuple(out)


def between(samples: Iterable[Sample], start_mono: float, end_mono: float) -> tuple[Sample, ...]:
    """The samples whose request started in [start_mono, end_mono): a window around a fault instant."""
    return tuple(s for s in samples if start_mono <= s.start_mono < end_mono)


def parse_locust_json(text: str, source: str = "locust.json") -> tuple[int, int]:
    """Requests and failures summed over the entries of locust's ``--json-file``."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(f"{source}: not JSON ({exc.msg})") from None
    if not isinstance(entries, list):
        raise LoadError(f"{source}: expected a list of request entries, got {type(entries).__name__}")
    requests = failures = 0
    for n, entry in enumerate(entries):
        got = (entry.get("num_requests"), entry.get("num_failures")) if isinstance(entry, dict) else (None, None)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in got):
            raise LoadError(f"{source}: entry {n} has no integer num_requests and num_failures")
        requests, failures = requests + got[0], failures + got[1]
    return requests, failures


def parse_locust_csv(text: str, source: str = "locust_stats.csv") -> LocustCsv:
    """The ``Aggregated`` row of locust's stats CSV."""
    rows = list(csv.DictReader(io.StringIO(text)))
    row = next((r for r in rows if r.get("Name") == "Aggregated"), None)
    if row is None:
        raise LoadError(f"{source}: no 'Aggregated' row (columns {list(rows[0]) if rows else 'none'})")

    def num(key: str) -> float | None:
        value = (row.get(key) or "").strip()
        if value in ("", "N/A"):
            return None
        try:
            return float(value)
        except ValueError:
            raise LoadError(f"{source}: Aggregated {key!r} is {value!r}, expected a number") from None

    requests, failures = num("Request Count"), num("Failure Count")
    if requests is None or failures is None:
        raise LoadError(f"{source}: the Aggregated row has no 'Request Count' or 'Failure Count'")
    return LocustCsv(int(requests), int(failures), num("50%"), num("95%"), num("99%"), num("Requests/s") or 0.0)


def locust_command(spec: LoadSpec, python: str = sys.executable) -> list[str]:
    """The command line locust is started with (docs/LOAD.md)."""
    return [python, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", str(spec.users),
            "-r", f"{spec.spawn_rate:g}", "-t", f"{max(1, math.ceil(spec.duration_s))}s", "--host", spec.host,
            "--only-summary", "--loglevel", "ERROR", "--stop-timeout", f"{spec.stop_timeout_s:g}",
            "--csv", str(spec.csv_prefix), "--json-file", str(spec.csv_prefix),
            *(u.value for u in spec.user_classes)]


def locust_env(spec: LoadSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the locustfile reads (its docstring lists each variable)."""
    env = dict(os.environ if base is None else base)
    env.update({"FIREDRILL_LOAD_SAMPLES": str(spec.samples_path), "FIREDRILL_LOAD_RUN_ID": spec.run_id,
                "FIREDRILL_LOAD_WAIT_S": f"{spec.wait_s:g}", "FIREDRILL_LOAD_TIMEOUT_S": f"{spec.request_timeout_s:g}",
                "FIREDRILL_LOAD_MODEL": spec.model, "FIREDRILL_LOAD_PROMPT": spec.prompt,
                "FIREDRILL_LOAD_MAX_TOKENS": str(spec.max_tokens), "FIREDRILL_LOAD_NAMESPACE": spec.namespace,
                "FIREDRILL_LOAD_OBJECT": spec.k8s_object, "FIREDRILL_LOAD_RETRIES": str(spec.retries),
                "FIREDRILL_LOAD_RETRY_BACKOFF_S": f"{spec.retry_backoff_s:g}",
                "FIREDRILL_LOAD_KEEPALIVE": "1" if spec.keep_alive else "0", "PYTHONUNBUFFERED": "1"})
    if spec.kubeconfig is not None:
        env["FIREDRILL_LOAD_KUBECONFIG"] = str(spec.kubeconfig)
    return env


# --- the process ------------------------------------------------------------------------------------------------


def check_reachable(url: str, timeout_s: float = 3.0) -> None:
    """A TCP connection to the URL's host and port, or a LoadError saying which URL and why."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadError(f"load host {url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise LoadError(f"load host {url} is unreachable ({parts.hostname}:{port}: {exc})") from None


def locust_available(python: str = sys.executable) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec("locust") is not None  # finds it without importing it
    probe = subprocess.run([python, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('locust') "
                                          "is None)"], capture_output=True, timeout=30)
    return probe.returncode == 0


class LoadRun:
    """A running locust process. :meth:`samples` reads what it has written so far (to line requests up with a
    fault while the load runs); :meth:`wait` waits for its end and returns the :class:`LoadResult`."""

    def __init__(self, spec: LoadSpec, *, python: str = sys.executable, check_host: bool = True) -> None:
        if not locust_available(python):
            raise LoadError(f"locust is not installed for {python} (pip install locust): the load generator runs "
                            "it as 'python -m locust'")
        if check_host and LoadUser.INFERENCE in spec.user_classes:
            check_reachable(spec.host)
        if spec.kubeconfig is not None and not spec.kubeconfig.is_file():
            raise LoadError(f"kubeconfig {spec.kubeconfig} does not exist")
        spec.out_dir.mkdir(parents=True, exist_ok=True)
        spec.samples_path.write_text("")
        Path(f"{spec.samples_path}.errors.json").unlink(missing_ok=True)
        self.spec = spec
        self.command = tuple(locust_command(spec, python))
        self.started = time.monotonic()
        self._log = open(spec.out_dir / "locust.log", "w+b")  # noqa: SIM115 (closed in wait)
        # cwd is out_dir: locust reads locust.conf / pyproject.toml from its cwd, and the repository's is not its
        self.proc = subprocess.Popen(self.command, cwd=spec.out_dir, env=locust_env(spec), stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        # Its own session keeps a Ctrl-C at the terminal for the harness; the warden ends it if the harness dies by
        # SIGKILL (a CI timeout), which would otherwise leave it loading the cluster for the rest of its duration.
        from refplatform.warden import warden  # the harness's process warden (docs/SAFETY.md)

        warden().watch(self.proc.pid)

    def __enter__(self) -> "LoadRun":
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving the block early (an error, Ctrl-C) ends locust too: it runs in its own session."""
        self.stop()
        if not self._log.closed:
            self._log.close()

    def portable_command(self) -> str:
        """The command as the evidence records it: no path of this machine (the interpreter is ``python``, the
        locustfile its path in the repository, the run's folder ``$LOAD_DIR``)."""
        words = []
        for word in self.command:
            if word == self.command[0]:
                word = "python"
            elif word == str(LOCUSTFILE):
                word = "drills/load/locustfile.py"
            words.append(word.replace(str(self.spec.out_dir), "$LOAD_DIR"))
        return " ".join(words)

    def samples(self) -> tuple[Sample, ...]:
        return parse_samples(self.spec.samples_path.read_text(encoding="utf-8"), str(self.spec.samples_path))

    def deadline_s(self) -> float:
        return self.spec.duration_s + self.spec.stop_timeout_s + STARTUP_GRACE_S

    def _output(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        """End locust early: SIGTERM (each user finishes its request within ``stop_timeout_s``, then locust writes
        its files), SIGKILL only if it is still there 10 s after that."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.spec.stop_timeout_s + 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def wait(self, timeout_s: float | None = None) -> LoadResult:
        timeout = self.deadline_s() if timeout_s is None else timeout_s
        try:
            code = self.proc.wait(timeout=max(0.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            tail = self._output()[-2000:]
            self._log.close()
            raise LoadError(f"locust did not finish within {timeout:.0f} s of its start (run of "
                            f"{self.spec.duration_s:g} s); stopped it. Its output:\n{tail}") from None
        wall = time.monotonic() - self.started
        output = self._output()
        self._log.close()
        if "No module named locust" in output:
            raise LoadError(f"locust is not installed for {self.command[0]} (pip install locust)")
        if code not in (0, 1):  # 1 is locust's --exit-code-on-error: some request failed, which we count ourselves
            raise LoadError(f"locust exited {code}: {' '.join(self.command)}\n{output[-2000:]}")
        errors = Path(f"{self.spec.samples_path}.errors.json")
        if errors.is_file():
            raised = json.loads(errors.read_text(encoding="utf-8"))
            first = raised[0] if raised else {}
            raise LoadError(f"a locust task raised {sum(e.get('count', 1) for e in raised)} time(s), so requests "
                            f"went unrecorded (a bug in drills/load/locustfile.py): {first.get('msg', '')}\n"
                            f"{first.get('traceback', '')}")
        stats, report = Path(f"{self.spec.csv_prefix}_stats.csv"), Path(f"{self.spec.csv_prefix}.json")
        for path in (stats, report):
            if not path.is_file():
                raise LoadError(f"locust exited {code} without writing {path}:\n{output[-2000:]}")
        requests, failures = parse_locust_json(report.read_text(encoding="utf-8"), str(report))
        locust = LocustTotals(requests, failures, parse_locust_csv(stats.read_text(encoding="utf-8"), str(stats)))
        samples = self.samples()
        return LoadResult(self.spec, samples, totals(samples), summarize(samples), locust, code, wall, self.command)


def run_load(spec: LoadSpec, *, python: str = sys.executable) -> LoadResult:
    """Run locust for ``spec.duration_s`` and return what it measured; raises LoadError on any failure to run."""
    return LoadRun(spec, python=python).wait()
