"""The canary's settings: defaults, flags over environment, the rank fallbacks, and errors that name the culprit."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from drills.canary.config import Config, RendezvousMode, parse_config
from drills.canary.errors import UsageError

REPO = Path(__file__).resolve().parents[3]


def parse(*argv: str, **env: str) -> Config:
    return parse_config(["train", *argv], env)


def test_defaults_are_the_documented_ones() -> None:
    cfg = parse()
    assert (cfg.steps_total, cfg.compute_seconds, cfg.input_seconds, cfg.comm_seconds) == (0, 0.05, 0.0, 0.0)
    assert (cfg.checkpoint_every, cfg.checkpoint_dir, cfg.rendezvous_dir, cfg.generation) == (10, None, None, "0")
    assert (cfg.stall_after, cfg.peer_timeout, cfg.payload_bytes, cfg.rendezvous_timeout) == (1.0, 300.0, 4096, 120.0)
    assert (cfg.rank, cfg.rank_from, cfg.world_size, cfg.rendezvous) == (0, "default", 1, RendezvousMode.NONE)
    assert not cfg.checkpoints and cfg.device_socket is None


@pytest.mark.parametrize(("env", "rank", "source"), [
    ({"RANK": "2", "VC_TASK_INDEX": "1", "JOB_COMPLETION_INDEX": "0"}, 2, "RANK"),
    ({"VC_TASK_INDEX": "1", "JOB_COMPLETION_INDEX": "3"}, 1, "VC_TASK_INDEX"),
    ({"RANK": "", "JOB_COMPLETION_INDEX": "3"}, 3, "JOB_COMPLETION_INDEX"),
    ({"JOB_COMPLETION_INDEX": "", "SLURM_PROCID": "3"}, 3, "SLURM_PROCID"),
    ({}, 0, "default"),
])
def test_rank_falls_back_to_volcano_then_the_indexed_job(env: dict[str, str], rank: int, source: str) -> None:
    cfg = parse_config(["train", "--rendezvous-dir", "/r"], {"WORLD_SIZE": "4", **env})
    assert (cfg.rank, cfg.rank_from) == (rank, source)


def test_a_task_of_a_slurm_step_reads_its_rank_world_generation_gpus_and_node_from_slurm() -> None:
    cfg = parse("--rendezvous-dir", "/r", SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_RESTART_COUNT="3",
                CUDA_VISIBLE_DEVICES="0,1", SLURMD_NODENAME="slurm-node-1")
    assert (cfg.rank, cfg.rank_from, cfg.world_size, cfg.generation) == (1, "SLURM_PROCID", 2, "3")
    assert cfg.gpus == ("0", "1") and cfg.node == "slurm-node-1" and cfg.as_log()["node"] == "slurm-node-1"
    # the platform-neutral variables win where both are set
    both = parse("--rendezvous-dir", "/r", RANK="0", WORLD_SIZE="4", SLURM_PROCID="1", SLURM_NTASKS="2",
                 FIREDRILL_GENERATION="7", SLURM_RESTART_COUNT="3", NVIDIA_VISIBLE_DEVICES="GPU-a",
                 CUDA_VISIBLE_DEVICES="0")
    assert (both.rank, both.world_size, both.generation, both.gpus) == (0, 4, "7", ("GPU-a",))


def test_on_slurm_the_gpus_are_the_nodes_indexes_not_the_constrained_cuda_numbering() -> None:
    """Under ConstrainDevices=yes Slurm 22.05 tells the second job on a node CUDA_VISIBLE_DEVICES=0,1 too (measured
    on tests/realslurm's cluster): only SLURM_STEP_GPUS tells two jobs' GPUs apart."""
    first = parse("--rendezvous-dir", "/r", CUDA_VISIBLE_DEVICES="0,1", SLURM_STEP_GPUS="0,1")
    second = parse("--rendezvous-dir", "/r", CUDA_VISIBLE_DEVICES="0,1", SLURM_STEP_GPUS="2,3")
    assert (first.gpus, second.gpus) == (("0", "1"), ("2", "3"))


def test_on_slurm_the_jobs_gpus_of_the_node_are_logged_for_the_invariant_watch() -> None:
    """Two tasks of one job bound to 4 GPUs each under ConstrainDevices=yes are both told SLURM_STEP_GPUS=0,1,2,3
    (measured); SLURM_JOB_GPUS names the 8 the job holds on the node, which no other job may hold."""
    task = parse("--rendezvous-dir", "/r", SLURM_STEP_GPUS="0,1,2,3", SLURM_JOB_GPUS="0,1,2,3,4,5,6,7")
    assert task.job_gpus == tuple("01234567") and task.as_log()["job_gpus"] == list("01234567")
    assert parse("--rendezvous-dir", "/r").as_log()["job_gpus"] is None


def test_flags_win_over_the_environment_and_the_mode_follows_master_addr() -> None:
    env = {"WORLD_SIZE": "2", "RANK": "1", "FIREDRILL_CHECKPOINT_DIR": "/env/ck", "FIREDRILL_RENDEZVOUS_DIR": "/env/r",
           "FIREDRILL_GENERATION": "5", "POD_IP": "127.0.0.3", "FIREDRILL_DEVICE_SOCKET": "/run/dev.sock"}
    cfg = parse("--checkpoint-dir", "/flag/ck", "--generation", "6", **env)
    assert (cfg.checkpoint_dir, cfg.rendezvous_dir, cfg.generation) == (Path("/flag/ck"), Path("/env/r"), "6")
    assert cfg.rendezvous is RendezvousMode.FILE and cfg.checkpoints
    assert (cfg.pod_ip, cfg.device_socket) == ("127.0.0.3", "/run/dev.sock")
    tcp = parse(**env, MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    assert tcp.rendezvous is RendezvousMode.TCP and (tcp.master_addr, tcp.master_port) == ("127.0.0.1", 29500)
    assert tcp.generation == "5"


@pytest.mark.parametrize(("argv", "env", "named"), [
    (["--steps-total", "-1"], {}, "--steps-total"),
    (["--compute-seconds", "fast"], {}, "--compute-seconds"),
    (["--stall-after", "0"], {}, "--stall-after"),
    (["--peer-timeout", "nan"], {}, "--peer-timeout"),
    (["--payload-bytes", str(2 << 30)], {}, "--payload-bytes"),
    (["--generation", "a/b"], {}, "--generation"),
    (["--bogus"], {}, "--bogus"),
    ([], {"FIREDRILL_GENERATION": "../x"}, "FIREDRILL_GENERATION"),
    ([], {"RANK": "two"}, "RANK"),
    ([], {"VC_TASK_INDEX": "-1"}, "VC_TASK_INDEX"),
    ([], {"WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ([], {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK"),
    ([], {"WORLD_SIZE": "2", "JOB_COMPLETION_INDEX": "5", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "JOB_COMPLETION_INDEX"),
    ([], {"SLURM_NTASKS": "2", "SLURM_PROCID": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "SLURM_NTASKS=2"),
    ([], {"SLURM_NTASKS": "x"}, "SLURM_NTASKS"),
    ([], {"MASTER_ADDR": "h"}, "MASTER_PORT"),
    ([], {"MASTER_PORT": "29500"}, "MASTER_ADDR"),
    ([], {"MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "MASTER_PORT"),
    ([], {"POD_IP": "pod-0"}, "POD_IP"),
    ([], {"WORLD_SIZE": "2"}, "--rendezvous-dir"),
])
def test_bad_input_names_the_option_or_variable(argv: list[str], env: dict[str, str], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        parse(*argv, **env)


def test_a_missing_subcommand_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="train"):
        parse_config([], {})


def test_the_start_line_config_is_plain_json_values() -> None:
    logged = parse("--checkpoint-dir", "/ck", "--steps-total", "3").as_log()
    assert logged["checkpoint_dir"] == "/ck" and logged["steps_total"] == 3 and logged["rendezvous"] == "none"


def test_the_console_script_is_declared() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["firedrill-canary"] == "drills.canary.__main__:main"


@pytest.mark.parametrize("value,gpus", [
    (None, None),
    ("", None),
    ("GPU-aaaa", ("GPU-aaaa",)),
    (" GPU-aaaa , MIG-bbbb ,", ("GPU-aaaa", "MIG-bbbb")),
    ("0,1", ("0", "1")),
])
def test_the_gpus_given_come_from_nvidia_visible_devices(value: str | None, gpus: tuple[str, ...] | None) -> None:
    env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
    assert parse_config(["train"], env).gpus == gpus
