"""The live dashboard as an operator sees it: Debian's Chromium, headless, on a running ``tuned`` platform.

Needs the ``playwright`` Python package and the ``chromium`` binary (``apt-get install chromium``); Playwright's
own browser downloads are never used.  Skipped, saying which is missing, when either is absent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from refplatform.store import Store
from tests.integration.test_cli import down, start_up

pytestmark = pytest.mark.integration

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                                             "(pip install playwright; no browser download)")
SCRIPT = "<script>alert(1)</script>"
PODS = resource_path("", "v1", "pods", "default")
JOBS = resource_path("batch.volcano.sh", "v1alpha1", "jobs", "default")
RANK = "stall-worker-0"
DEADLINE_MS = 30_000


def seed_script_pod(data_dir: Path) -> None:
    """Write a pod named ``<script>alert(1)</script>`` straight into the store, before the API server starts.

    The API validates names (RFC 1123), so no client can create this pod; but the dashboard must never
    trust a name (data can arrive from a restored store, another controller, a future relaxed rule), so
    the test puts one where the page will show it.  It has no node and a ``schedulerName`` that no
    controller of this platform serves, so nothing acts on it: it stays in the dashboard's pending list.
    """
    data_dir.mkdir(parents=True)
    store = Store(data_dir)
    try:
        store.create("core/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": SCRIPT, "namespace": "default"},
            "spec": {"schedulerName": "firedrill.dev/nobody", "containers": [{"name": "main", "image": "pause"}]},
            "status": {"phase": "Pending"}}, now="2026-01-01T00:00:00Z")
    finally:
        store.close()


def stalling_job(name: str, gpus: int) -> dict[str, Any]:
    """A one-rank training Volcano Job that waits on its input 60 % of every step and restarts when evicted."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
            "spec": {"minAvailable": 1, "maxRetry": 3, "queue": "default", "schedulerName": "volcano",
                     "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                     "tasks": [{"name": "worker", "replicas": 1, "template": {
                         "metadata": {"annotations": {"firedrill.dev/workload": "training",
                                                      "firedrill.dev/input-stall-share": "0.6",
                                                      "firedrill.dev/step-seconds": "0.2",
                                                      "firedrill.dev/checkpoint-every": "5"}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "main", "image": "firedrill/canary:1",
                             "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}]}}


def eventually(what: str, predicate: Any, timeout: float = 30.0) -> None:
    def check() -> bool:
        try:
            return bool(predicate())
        except (ApiStatusError, ApiUnreachable):
            return False
    wait_until(check, timeout, what, interval=0.1)


def cell_states(page: Any, node: str) -> list[str]:
    return page.locator(f'[data-testid="gpu-cell"][data-node="{node}"]').evaluate_all(
        "cells => cells.map(c => c.dataset.state)")


def test_dashboard_names_the_leak_follows_the_grid_and_shows_names_as_text(browser: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "c"
    seed_script_pod(data_dir)
    spec = ClusterSpec(data_dir, nodes=2, spares=1, gpus_per_node=4, profile="tuned")
    cluster = Cluster(spec)
    cluster.start()
    api = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file)
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 1000})
    try:
        cluster.wait_ready(30)
        page = context.new_page()
        dialogs: list[str] = []
        errors: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)  # CSP too
        # The URL `firedrill up` prints: the token rides in the fragment, which never reaches the server.
        page.goto(f"{cluster.url}/dashboard#token={cluster.token}")

        # The seeded name is shown as text, and nothing ran.
        shown = page.get_by_test_id("pending-name").filter(has_text="alert(1)")
        shown.wait_for(timeout=DEADLINE_MS)
        assert shown.inner_text() == SCRIPT and shown.is_visible()
        assert page.locator("script").count() == 1, "a script element appeared in the page"
        assert page.get_by_test_id("legend").is_visible()
        assert "updated" in page.get_by_test_id("updated").inner_text()

        working, spare = spec.node_names(), spec.spare_names()[0]
        for node in working:
            assert cell_states(page, node) == ["free"] * 4
        assert cell_states(page, spare) == ["spare"] * 4

        # A trainer that waits on its input 60 % of every step: the data pipeline leaks most.
        api.create(JOBS, stalling_job("stall", 4))
        eventually(f"{RANK} to be bound", lambda: api.get(f"{PODS}/{RANK}")["spec"].get("nodeName"))
        victim = str(api.get(f"{PODS}/{RANK}")["spec"]["nodeName"])
        page.wait_for_function(
            "([node, pod]) => [...document.querySelectorAll(`[data-testid=gpu-cell][data-node='${node}']`)]"
            ".every(c => c.dataset.state === 'allocated' && c.textContent.includes(pod))",
            arg=[victim, RANK], timeout=DEADLINE_MS)
        top = page.get_by_test_id("top-hole-words")
        page.wait_for_function(
            "() => (document.querySelector('[data-testid=top-hole-words]') || {}).textContent === 'data pipeline'",
            timeout=DEADLINE_MS)
        assert top.inner_text() == "data pipeline"
        assert "data pipeline" in page.get_by_test_id("top-hole").inner_text()

        # A shorter window: the layers and holes are for it, today's summary stays in view.
        page.select_option("#window", "15m")
        page.get_by_test_id("today-text").filter(has_text="Today so far: The largest hole is data pipeline") \
            .wait_for(timeout=DEADLINE_MS)
        assert "last 15 minutes" in page.get_by_test_id("top-hole").inner_text()

        # Pull the node under the trainer: its GPUs leave service, the spare is released, the job heals there.
        eventually("a checkpoint to resume from", lambda: int((api.get(f"{PODS}/{RANK}")["metadata"].get(
            "annotations") or {}).get("firedrill.dev/checkpoint-step", "0")) >= 5)
        cluster.agents[victim].kill()
        page.wait_for_function(
            "node => [...document.querySelectorAll(`[data-testid=gpu-cell][data-node='${node}']`)]"
            ".every(c => c.dataset.state === 'unhealthy' || c.dataset.state === 'quarantined')",
            arg=victim, timeout=DEADLINE_MS)
        page.wait_for_function(
            "node => [...document.querySelectorAll(`[data-testid=gpu-cell][data-node='${node}']`)]"
            ".every(c => c.dataset.state !== 'spare')", arg=spare, timeout=DEADLINE_MS)
        page.wait_for_function(
            "([node, pod]) => [...document.querySelectorAll('[data-testid=gpu-cell]')].filter(c => c.dataset.node "
            "!== node && c.dataset.state === 'allocated' && c.textContent.includes(pod)).length === 4",
            arg=[victim, RANK], timeout=DEADLINE_MS)
        row = page.get_by_test_id("incident-row").filter(has_text=victim).filter(has_text="default/stall")
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=incident-row]')]"
                ".some(r => [...r.cells].slice(3).every(c => /^[0-9.]+$/.test(c.textContent)))",
                timeout=DEADLINE_MS)
        except sync_api.TimeoutError:
            with cluster.http_client() as http:
                view = http.get("/apis/firedrill.dev/v1alpha1/dashboard").json()
            table = page.get_by_test_id("incidents").inner_text()
            raise AssertionError(f"the incident never showed all five phases:\n{table}\n{view['incidents']}") from None
        seconds = [float(x) for x in row.locator("td").all_inner_texts()[3:]]
        # The phases tile fault..resume exactly; each of the five cells is rounded to 0.01 s on its own,
        # so the shown total may differ from the shown sum by up to 5 x 0.005 s.
        assert len(seconds) == 5 and seconds[4] == pytest.approx(sum(seconds[:4]), abs=0.026), seconds

        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert shown.inner_text() == SCRIPT
        assert not dialogs, f"a dialog fired: {dialogs}"
        assert not errors, errors

        # A platform without the leak report endpoint: the page says so and still shows the grid.
        other = context.new_page()
        other.route("**/leakreport?*", lambda route: route.fulfill(status=404, content_type="application/json",
                                                                    body='{"kind":"Status","code":404}'))
        other.goto(f"{cluster.url}/dashboard#token={cluster.token}")
        other.get_by_test_id("top-hole").filter(has_text="Leak report not available").wait_for(timeout=DEADLINE_MS)
        assert other.get_by_test_id("gpu-cell").count() == 12
        # The fragment is dropped from the address bar once read: the token stays out of the history.
        assert "token" not in other.url, other.url
        # Opened without the token: it asks for one and says which file holds it.
        other.goto(f"{cluster.url}/dashboard")
        other.reload()
        other.get_by_test_id("problem").filter(has_text="admin-token").wait_for(timeout=DEADLINE_MS)
        other.get_by_test_id("token-form").wait_for(timeout=DEADLINE_MS)
        # A wrong token is refused (401) and the form comes back; the right one shows the grid.
        other.get_by_test_id("token-input").fill("not-the-token")
        other.get_by_test_id("token-input").press("Enter")
        other.get_by_test_id("problem").filter(has_text="401").wait_for(timeout=DEADLINE_MS)
        other.get_by_test_id("token-input").fill(cluster.token)
        other.get_by_test_id("token-input").press("Enter")
        other.get_by_test_id("gpu-cell").first.wait_for(timeout=DEADLINE_MS)
        assert other.get_by_test_id("token-form").is_hidden()
    finally:
        context.close()
        api.close()
        cluster.stop()


def test_firedrill_up_prints_a_dashboard_url_that_opens(browser: Any, tmp_path: Path) -> None:
    data = tmp_path / "up"
    proc, lines = start_up(data, "--nodes", "1", "--gpus-per-node", "2", "--spares", "0", "--heartbeat", "0.5")
    try:
        wait_until(lambda: any("Stop with Ctrl-C" in line for line in lines) or proc.poll() is not None,
                   60, "`firedrill up` to report the cluster up")
        text = "".join(lines)
        match = re.search(r"Dashboard: (https://127\.0\.0\.1:\d+/dashboard)\s", text)
        assert match, text
        token_file = data / "admin-token"
        assert str(token_file) in text, "the file holding the token is not named"
        assert token_file.read_text().strip() not in text, "firedrill up printed the token"
        assert str(data / "pki" / "ca.crt") in text, "the CA the browser will warn about is not named"
        context = browser.new_context(ignore_https_errors=True)
        try:
            page = context.new_page()
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(match.group(1))
            page.get_by_test_id("token-input").fill(token_file.read_text().strip())
            page.get_by_test_id("token-input").press("Enter")
            page.locator('[data-testid="gpu-cell"][data-node="gpu-node-0"][data-state="free"]').nth(1).wait_for(
                timeout=DEADLINE_MS)
            assert not any("token=" in url for url in requests), "the token left the browser in a URL"
        finally:
            context.close()
    finally:
        down(data, proc)
