"""Fault mixes as data and the seeded schedule a campaign draws from them (issue 27)."""

from __future__ import annotations

import pytest

from drills.target.faultmix import FaultKind, MixError, load_mix, parse_mix, schedule

GOOD = """\
name: mine
faults:
  - kind: node-kill
    weight: 3
  - kind: gpu-xid
    weight: 1
    xid: 79
"""


def test_the_shipped_mixes_load_and_the_llama3_weights_are_the_published_counts() -> None:
    llama = load_mix("llama3-405b")
    kept = sum(f.weight for f in llama.faults)
    left = sum(int(row.split("(")[1].split(")")[0]) for row in llama.left_out)
    assert kept + left == 419  # every unexpected interruption of the table is either drilled or said left out
    assert {f.kind for f in llama.faults} == {FaultKind.GPU_XID, FaultKind.GPU_SLOW, FaultKind.NODE_KILL,
                                             FaultKind.NODE_PARTITION, FaultKind.RANK_HANG}
    gpu = sum(llama.share(f) for f in llama.faults if f.kind in (FaultKind.GPU_XID, FaultKind.GPU_SLOW))
    assert gpu == pytest.approx(262 / 357)
    (hang,) = [f for f in llama.faults if f.kind is FaultKind.RANK_HANG]
    assert hang.weight == 7 and "NCCL watchdog timeouts (7)" in hang.source_row  # hangs and timeouts: issue 48
    assert {f.kind for f in load_mix("node-loss").faults} == {FaultKind.NODE_KILL, FaultKind.NODE_HANG}


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    mix = parse_mix(GOOD)
    first, again = schedule(mix, 42, 20.0, 180.0), schedule(mix, 42, 20.0, 180.0)
    assert first == again and first != schedule(mix, 43, 20.0, 180.0)
    assert all(0 < f.at < 180 for f in first) and [f.at for f in first] == sorted(f.at for f in first)


def test_arrivals_are_poisson_and_kinds_follow_the_weights() -> None:
    faults = schedule(parse_mix(GOOD), 7, 10.0, 100_000.0)
    assert len(faults) == pytest.approx(10_000, rel=0.05)  # mean gap 10 s
    kills = sum(f.fault.kind is FaultKind.NODE_KILL for f in faults) / len(faults)
    assert kills == pytest.approx(0.75, abs=0.02)


@pytest.mark.parametrize("text, message", [
    ("name: x\nfaults:\n  - kind: node-kil\n    weight: 1\n", "<mix>:3: unknown fault kind 'node-kil'; write one of"),
    ("name: x\nfaults:\n  - kind: gpu-xid\n    weight: 1\n", "<mix>:3: the gpu-xid fault needs xid"),
    ("name: x\nfaults:\n  - kind: gpu-slow\n    weight: 1\n    speed: 1.5\n", "<mix>:5: speed is 1.5; write a "
     "fraction"),
    ("name: x\nfaults:\n  - kind: node-kill\n    weight: -2\n", "<mix>:4: weight is -2; write a number above 0"),
    ("name: x\nfaults:\n  - kind: node-kill\n    weight: lots\n", "<mix>:4: weight is 'lots', not a number"),
    ("name: x\nfaults:\n  - kind: node-kill\n    weight: 1\n    xid: 79\n", "<mix>:5: xid belongs to gpu-xid"),
    ("name: x\nfaults:\n  - kind: node-kill\n    wieght: 1\n", "<mix>:4: unknown field 'wieght' in a fault"),
    ("name: x\nfaults: []\n", "<mix>:2: faults must be a list of at least one fault"),
    ("faults:\n  - kind: node-kill\n    weight: 1\n", "the mix has no name"),
    ("name: x\nfaults:\n  - kind: [node-kill\n", "<mix>:4: not YAML"),
])
def test_a_malformed_mix_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(MixError) as err:
        parse_mix(text)
    assert message in str(err.value)


def test_an_unknown_mix_name_lists_the_shipped_ones() -> None:
    with pytest.raises(MixError, match=r"no fault mix 'llama4'.*llama3-405b, node-loss"):
        load_mix("llama4")
