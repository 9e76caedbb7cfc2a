"""The harness's log follower against a live embedded platform: a pod followed from its binding has its log
opened when the watch shows its container start, not a retry interval later (issue 30: node pull's t_resume is
the instant the replacement rank's line is received, so a late stream is a timing error)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from drills.kube.driver import POD
from drills.kube.logs import LogFollower, LogLine
from drills.target.connect import Target, embedded_target
from tests.integration.kube import pod_manifest

pytestmark = pytest.mark.integration

RETRY_S = 30.0
"""Far longer than the test waits: only the watch's wake-up can open the log in time."""


@pytest.fixture
def target() -> Iterator[Target]:
    t = embedded_target(nodes=1, spares=0)
    try:
        yield t
    finally:
        t.close()


def test_a_pod_followed_from_its_binding_is_read_when_its_container_starts(target: Target) -> None:
    driver, ns = target.driver, target.profile.namespace
    lines: list[LogLine] = []
    first = threading.Event()

    def on_line(line: LogLine) -> None:
        lines.append(line)
        first.set()

    follower = LogFollower(driver, on_line, target.timeline.clock, retry_interval=RETRY_S)
    running_at: list[float] = []

    def on_pod(event: str, pod: dict) -> None:
        if (pod.get("status") or {}).get("phase") == "Running" and not running_at:
            running_at.append(time.monotonic())
        follower.follow(pod)  # the first call (bound, not yet running) starts; later ones wake it

    manifest = pod_manifest("follow-me", annotations={"firedrill.dev/workload": "training",
                                                     "firedrill.dev/step-seconds": "0.1"})
    manifest["metadata"]["namespace"] = ns
    driver.watch(POD, ns, field_selector="metadata.name=follow-me", on_event=on_pod, record=False)
    try:
        driver.create(manifest)
        assert first.wait(10), "no log line within 10 s: the follower waited out its retry interval"
        assert running_at, "the watch never showed the pod Running"
        assert lines[0].pod == "follow-me" and lines[0].uid
        # the stream opened on the watch's word: well inside one retry interval of the container starting
        assert lines[0].mono - running_at[0] < 5.0
        assert len(follower.following()) == 1
    finally:
        follower.stop()
        driver.stop_watches()
    assert not follower.following(), "stop() ends every follow"
