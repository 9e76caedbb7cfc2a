"""The simulated GPU: integration on a virtual clock (pure), and the real datagram socket with the pid check."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from refplatform.agent.clock import SystemClock, VirtualClock
from refplatform.agent.device import Device, DeviceIntegrator, DeviceState, parse_datagram, socket_path_for
from refplatform.cluster import wait_until

C, M, I, D = DeviceState.COMPUTE, DeviceState.COMM, DeviceState.INPUT, DeviceState.IDLE


def test_time_in_each_state_and_comm_bytes_are_integrated_exactly() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator()
    t0 = clock.now()
    dev.attach("pod", t0)
    clock.advance(1.0)                       # 1.0 s idle before the first datagram
    dev.observe("pod", 10, I, 0, clock.now())
    clock.advance(0.25)
    dev.observe("pod", 10, C, 0, clock.now())
    clock.advance(0.5)
    dev.observe("pod", 10, M, 4096, clock.now())
    clock.advance(0.125)
    dev.observe("pod", 10, D, 0, clock.now())
    clock.advance(2.0)
    totals = dev.totals("pod", clock.now())
    assert totals is not None
    assert (totals.input_s, totals.compute_s, totals.comm_s, totals.idle_s) == (0.25, 0.5, 0.125, 3.0)
    assert totals.comm_bytes == 4096 and totals.stepped_s == 0.875 and totals.at == clock.now()
    assert dev.seen("pod") and not dev.seen("other")


def test_a_state_holds_until_the_process_is_gone_then_the_pod_is_idle() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator()
    dev.attach("pod", clock.now())
    dev.observe("pod", 10, C, 0, clock.now())
    clock.advance(3.0)
    dev.process_gone("pod", 10, clock.now())
    clock.advance(4.0)
    totals = dev.totals("pod", clock.now())
    assert totals is not None and (totals.compute_s, totals.idle_s) == (3.0, 4.0)


def test_the_busiest_process_of_a_pod_decides_and_a_main_process_takes_its_children_with_it() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator()
    dev.attach("pod", clock.now())
    dev.observe("pod", 11, I, 0, clock.now(), main=10)     # a child of main process 10
    dev.observe("pod", 12, C, 0, clock.now(), main=10)
    clock.advance(1.0)
    dev.observe("pod", 12, D, 0, clock.now(), main=10)     # 11 still waits on input
    clock.advance(1.0)
    dev.process_gone("pod", 10, clock.now())               # main exited: its children no longer count
    clock.advance(1.0)
    totals = dev.totals("pod", clock.now())
    assert totals is not None and (totals.compute_s, totals.input_s, totals.idle_s) == (1.0, 1.0, 1.0)


def test_shares_cover_the_last_window() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator(window=1.0)
    dev.attach("pod", clock.now())
    for _ in range(10):  # 10 steps of 0.5 s: 0.1 input, 0.3 compute, 0.1 comm moving 1000 bytes
        dev.observe("pod", 7, I, 0, clock.now())
        clock.advance(0.1)
        dev.observe("pod", 7, C, 0, clock.now())
        clock.advance(0.3)
        dev.observe("pod", 7, M, 1000, clock.now())
        clock.advance(0.1)
    shares = dev.shares("pod", clock.now())
    assert shares is not None
    assert (shares.input, shares.compute, shares.comm) == pytest.approx((0.2, 0.6, 0.2))
    assert shares.engine == pytest.approx(0.8) and shares.bytes_per_s == pytest.approx(2000.0)
    dev.observe("pod", 7, D, 0, clock.now())
    clock.advance(5.0)
    quiet = dev.shares("pod", clock.now())
    assert quiet is not None and (quiet.engine, quiet.input, quiet.bytes_per_s) == (0.0, 0.0, 0.0)
    assert dev.shares("absent", clock.now()) is None


def test_with_stalls_as_compute_input_waits_count_as_compute() -> None:
    clock = VirtualClock()
    honest, broken = DeviceIntegrator(), DeviceIntegrator(stalls_as_compute=True)
    for dev in (honest, broken):
        dev.attach("pod", clock.now())
        dev.observe("pod", 1, I, 0, clock.now())
    clock.advance(2.0)
    for dev in (honest, broken):
        dev.observe("pod", 1, C, 0, clock.now())
    clock.advance(1.0)
    h, b = honest.totals("pod", clock.now()), broken.totals("pod", clock.now())
    assert h is not None and b is not None
    assert (h.input_s, h.compute_s) == (2.0, 1.0)
    assert (b.input_s, b.compute_s) == (0.0, 3.0)
    assert h.stepped_s == b.stepped_s == 3.0


def test_a_freeze_counts_as_idle_even_when_a_datagram_came_before_it_was_noticed() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator()
    dev.attach("pod", clock.now())
    dev.observe("pod", 1, C, 0, clock.now())
    clock.advance(1.0)
    # frozen for 5 s; one datagram is handled at the thaw before the agent notices
    clock.advance(5.0)
    dev.observe("pod", 1, C, 0, clock.now())
    clock.advance(0.2)
    dev.thaw(clock.now(), 5.2)
    clock.advance(1.0)
    totals = dev.totals("pod", clock.now())
    assert totals is not None
    assert totals.compute_s == pytest.approx(2.0) and totals.idle_s == pytest.approx(5.2)


def test_detach_returns_final_totals_and_forgets_the_pod() -> None:
    clock = VirtualClock()
    dev = DeviceIntegrator()
    dev.attach("pod", clock.now())
    dev.observe("pod", 1, M, 10, clock.now())
    clock.advance(1.0)
    final = dev.detach("pod", clock.now())
    assert final is not None and final.comm_s == 1.0 and final.comm_bytes == 10
    assert dev.totals("pod", clock.now()) is None and dev.detach("pod", clock.now()) is None
    dev.observe("pod", 1, C, 0, clock.now() + timedelta(seconds=1))  # ignored: not attached
    assert not dev.attached("pod")


@pytest.mark.parametrize(("raw", "parsed"), [
    (b'{"pid": 5, "state": "comm", "bytes": 64}', (5, M, 64)),
    (b'{"pid": 5, "state": "compute"}', (5, C, 0)),
    (b'{"pid": 5, "state": "input", "bytes": -3}', (5, I, 0)),
    (b'{"pid": 5, "state": "checkpoint"}', (5, DeviceState.IDLE, 0)),  # a checkpoint write leaves the GPU idle
    (b'{"pid": 5, "state": "sleeping"}', None),
    (b'{"pid": "5", "state": "idle"}', None),
    (b'{"pid": true, "state": "idle"}', None),
    (b'[1, 2]', None),
    (b'\xff\xfe', None),
])
def test_datagrams_are_parsed_strictly(raw: bytes, parsed: object) -> None:
    assert parse_datagram(raw) == parsed


# -- the real socket -------------------------------------------------------------------------------

SENDER = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for state in sys.argv[2:]:
    s.sendto(json.dumps({"pid": os.getpid(), "state": state, "bytes": 100}).encode(), sys.argv[1])
"""


@pytest.fixture
def device(tmp_path: Path) -> Iterator[Device]:
    d = Device(socket_path_for(tmp_path, "gpu-node-0"), VirtualClock())
    d.start()
    try:
        yield d
    finally:
        d.stop()


def test_the_socket_accepts_only_processes_of_this_nodes_containers(device: Device) -> None:
    clock = device.clock
    assert isinstance(clock, VirtualClock)
    device.attach("pod-a", clock.now())
    # a container's main process: a shell whose child (python) sends, so the descendant check is exercised
    main = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{SENDER}' {device.path} comm; sleep 30"])
    try:
        device.add_process("pod-a", main.pid)
        wait_until(lambda: device.accepted >= 1, 10, "the container's datagram")
        # a process of no container is ignored, whatever pid it claims
        stranger = subprocess.run([sys.executable, "-c", SENDER, str(device.path), "compute"], check=True)
        assert stranger.returncode == 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:  # this test process claims main's pid
            s.sendto(json.dumps({"pid": main.pid, "state": "compute"}).encode(), str(device.path))
        wait_until(lambda: device.ignored >= 2, 10, "the stranger's datagrams ignored")
        clock.advance(2.0)
        totals = device.totals("pod-a", clock.now())
        assert totals is not None and totals.comm_s == 2.0 and totals.compute_s == 0.0 and totals.comm_bytes == 100
        assert device.accepted == 1
    finally:
        main.kill()
        main.wait()


def test_the_socket_path_stays_under_the_data_dir_when_it_fits(tmp_path: Path) -> None:
    short = socket_path_for(Path("/d"), "n")
    assert short == Path("/d/nodes/n/device.sock")
    long = socket_path_for(tmp_path / ("x" * 120), "n")
    assert len(os.fsencode(str(long))) <= 107 and long.name == "device.sock"
    assert long == socket_path_for(tmp_path / ("x" * 120), "n")


ON_DEMAND = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for line in sys.stdin:
    for state in line.split():
        s.sendto(json.dumps({"pid": os.getpid(), "state": state}).encode(), sys.argv[1])
    print("sent", flush=True)
"""


def test_a_datagram_read_late_counts_from_when_the_kernel_queued_it(tmp_path: Path) -> None:
    """An agent starved of CPU reads a datagram late: the state change counts from the kernel's stamp, not from
    the read or the handling, so the state it ended is not stretched by the wait. The wait is real (the kernel
    stamps with the real clock): the serving thread is held on the device's lock for 0.5 s with one datagram
    read and the next one queued."""
    device = Device(socket_path_for(tmp_path, "gpu-node-0"), SystemClock())
    device.start()
    with subprocess.Popen([sys.executable, "-c", ON_DEMAND, str(device.path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as sender:
        assert sender.stdin is not None and sender.stdout is not None
        try:
            device.attach("pod-a", device.clock.now())
            device.add_process("pod-a", sender.pid)
            sender.stdin.write("input\n")
            sender.stdin.flush()
            wait_until(lambda: device.accepted >= 1, 10, "the input datagram")
            with device._lock:  # the serving thread reads "comm" and waits here, while "compute" queues behind it
                sender.stdin.write("comm compute\n")
                sender.stdin.flush()
                assert sender.stdout.readline() == "sent\n" and sender.stdout.readline() == "sent\n"
                time.sleep(0.5)
            wait_until(lambda: device.accepted >= 3, 10, "every datagram")
            totals = device.totals("pod-a", device.clock.now())
            assert totals is not None and totals.compute_s > 0, totals
            # "comm" and "compute" were sent together: neither input (read on time) nor comm (read on time, handled
            # late) nor the wait of "compute" in the queue stretches a state by the half second
            assert totals.input_s < 0.25 and totals.comm_s < 0.25, totals
        finally:
            sender.kill()
            device.stop()
