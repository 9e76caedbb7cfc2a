"""The Ray driver's bad input and unreachable cluster: a clear error naming what and where (drills.ray.driver).
Its reads and acts against a real Ray cluster are tests/realray/test_driver.py."""

from __future__ import annotations

import socket

import pytest

from drills.ray.driver import RayDriver
from drills.ray.state import RayError


def test_an_address_that_is_not_a_url_is_refused_saying_how_to_write_it() -> None:
    with pytest.raises(RayError, match=r"'10.0.0.1:8265' is not an http\(s\) URL: write it as http://HOST:8265"):
        RayDriver("10.0.0.1:8265")


def test_a_dashboard_that_is_not_there_names_the_request_and_what_to_check() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    driver = RayDriver(f"http://127.0.0.1:{port}/", timeout=2)
    try:
        with pytest.raises(RayError, match=rf"GET http://127.0.0.1:{port}/api/v0/nodes\?detail=1.*is the Ray head up"):
            driver.nodes()
    finally:
        driver.close()
