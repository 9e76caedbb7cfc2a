"""The inference canary's settings: documented defaults, flags over environment, errors that name the culprit."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.inference.config import Config, parse_config
from drills.inference.errors import UsageError


def parse(*argv: str, **env: str) -> Config:
    return parse_config(["serve", *argv], env)


def test_defaults_are_the_documented_ones() -> None:
    cfg = parse()
    assert (cfg.host, cfg.host_from, cfg.port, cfg.model) == ("127.0.0.1", "default", 0, "firedrill-canary")
    assert (cfg.ttft_seconds, cfg.tpot_seconds, cfg.max_batch, cfg.max_queue) == (0.05, 0.01, 8, 64)
    assert (cfg.warmup_seconds, cfg.port_file, cfg.device_socket) == (0.0, None, None)


def test_every_flag_is_read() -> None:
    cfg = parse("--host", "0.0.0.0", "--port", "8000", "--model", "llama-3/8b", "--ttft-seconds", "0.2",
                "--tpot-seconds", "0", "--max-batch", "2", "--max-queue", "0", "--warmup-seconds", "1.5",
                "--port-file", "run/port", "--device-socket", "/dev.sock")
    assert (cfg.host, cfg.host_from, cfg.port, cfg.model) == ("0.0.0.0", "--host", 8000, "llama-3/8b")
    assert (cfg.ttft_seconds, cfg.tpot_seconds, cfg.max_batch, cfg.max_queue) == (0.2, 0.0, 2, 0)
    assert (cfg.warmup_seconds, cfg.port_file, cfg.device_socket) == (1.5, Path("run/port"), "/dev.sock")
    assert cfg.as_log()["port_file"] == "run/port" and cfg.as_log()["drain_seconds"] == 10.0


def test_the_environment_fills_host_and_device_and_flags_win() -> None:
    env = {"POD_IP": "10.1.2.3", "FIREDRILL_DEVICE_SOCKET": "/run/gpu.sock"}
    cfg = parse_config(["serve"], env)
    assert (cfg.host, cfg.host_from, cfg.device_socket) == ("10.1.2.3", "POD_IP", "/run/gpu.sock")
    cfg = parse_config(["serve", "--host", "::1", "--device-socket", "/mine.sock"], env)
    assert (cfg.host, cfg.host_from, cfg.device_socket) == ("::1", "--host", "/mine.sock")
    cfg = parse_config(["serve"], {"POD_IP": " ", "FIREDRILL_DEVICE_SOCKET": ""})  # empty counts as unset
    assert (cfg.host, cfg.host_from, cfg.device_socket) == ("127.0.0.1", "default", None)


@pytest.mark.parametrize(("argv", "named", "detail"), [
    (["--port", "65536"], "--port", "in 0..65535"),
    (["--port", "http"], "--port", "expected an integer"),
    (["--max-batch", "0"], "--max-batch", ">= 1"),
    (["--max-queue", "-1"], "--max-queue", ">= 0"),
    (["--ttft-seconds", "-0.1"], "--ttft-seconds", ">= 0"),
    (["--tpot-seconds", "nan"], "--tpot-seconds", ">= 0"),
    (["--warmup-seconds", "soon"], "--warmup-seconds", "expected seconds"),
    (["--host", "localhost"], "--host", "IP address"),
    (["--model", "has space"], "--model", "letters"),
    (["--port-file", " "], "--port-file", "expected a path"),
    (["--bogus"], "--bogus", "unrecognized"),
])
def test_a_bad_option_is_named(argv: list[str], named: str, detail: str) -> None:
    with pytest.raises(UsageError) as err:
        parse(*argv)
    assert named in str(err.value) and detail in str(err.value)


def test_a_bad_pod_ip_names_the_variable() -> None:
    with pytest.raises(UsageError, match="environment variable POD_IP: expected an IP address, got 'pod-a'"):
        parse_config(["serve"], {"POD_IP": "pod-a"})


def test_the_command_is_required() -> None:
    with pytest.raises(UsageError, match="serve"):
        parse_config([], {})


def test_the_gpus_given_come_from_nvidia_visible_devices() -> None:
    assert parse_config(["serve"], {}).gpus is None
    assert parse_config(["serve"], {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}).gpus == ("GPU-a", "GPU-b")
