"""The signed baseline statement (in-toto in DSSE, Ed25519), the slice-by-slice observation on an injected clock,
and the workload mix file."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from drills.kinds.baseline.errors import BaselineUsageError, NotVerified, ObservationError
from drills.kinds.baseline.method import Method, leak_report_source, window_method
from drills.kinds.baseline.mix import DEFAULT_MIX, parse_mix
from drills.kinds.baseline.observe import Window, observe
from drills.kinds.baseline.slices import HOLES, Slice
from drills.kinds.baseline.statement import PREDICATE_TYPE, load, predicate, seal
from drills.records.evidence.signing import PAYLOAD_TYPE, Signer, generate_keypair
from drills.target.leakreport.model import LeakReading, ReportUnavailable

METHOD = Method(source=leak_report_source(), workload={"kind": "mix", "mix": DEFAULT_MIX.to_dict()},
                window=window_method(60, 3, 5))


def some_slices() -> list[Slice]:
    return [Slice(f"s{i}", f"e{i}", 1.0, {"allocated": 0.5, "active": 0.3, "effective": 0.1 + i / 100},
                  {h: 0.01 * i for h in HOLES}, "a" * 64) for i in range(3)]


def write(tmp_path: Path, signer: Signer, name: str = "b.dsse.json") -> Path:
    pred = predicate(METHOD, some_slices(), start="2027-01-01T00:00:00Z", end="2027-01-01T00:01:00Z",
                     source_kind="apiserver", source_where="here", unmeasured={}, target={"kind": "embedded"},
                     notes=[], signer=signer, created="2027-01-01T00:01:05Z")
    path = tmp_path / name
    path.write_bytes(seal(pred, signer, "f" * 64))
    return path


def test_a_sealed_baseline_reads_back_with_its_method_and_slices(tmp_path: Path) -> None:
    signer = Signer.generate_ephemeral()
    got = load(write(tmp_path, signer))
    assert got.method.to_dict() == METHOD.to_dict()
    assert [s.to_dict() for s in got.slices] == [s.to_dict() for s in some_slices()]
    assert got.keyid == signer.keyid and "integrity only" in got.identity and "throwaway" in got.identity
    envelope = json.loads((tmp_path / "b.dsse.json").read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert envelope["payloadType"] == PAYLOAD_TYPE
    assert statement["predicateType"] == PREDICATE_TYPE
    assert [s["name"] for s in statement["subject"]] == ["observation", "target-fingerprint"]
    assert statement["predicate"]["summary"]["layers"]["effective"]["share"] == pytest.approx(0.11)


def test_a_changed_number_breaks_the_signature_and_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, Signer.generate_ephemeral())
    envelope = json.loads(path.read_text())
    payload = base64.b64decode(envelope["payload"]).replace(b'"effective":0.1}', b'"effective":0.3}', 1)
    assert b'"effective":0.3}' in payload
    envelope["payload"] = base64.b64encode(payload).decode()
    path.write_text(json.dumps(envelope))
    with pytest.raises(NotVerified, match="does not verify: the Ed25519 signature does not match the payload"):
        load(path)


def test_a_file_that_is_not_an_envelope_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(NotVerified, match="not a DSSE envelope"):
        load(path)
    with pytest.raises(BaselineUsageError, match="cannot read"):
        load(tmp_path / "missing.json")


def test_the_key_given_proves_who_signed_and_another_key_is_refused(tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path / "keys")
    signer = Signer.from_key_file(private)
    path = write(tmp_path, signer)
    got = load(path, public)
    assert got.identity.startswith("the key given")
    _, other = generate_keypair(tmp_path / "other")
    with pytest.raises(NotVerified, match="not the verifying key"):
        load(path, other)


def test_another_kind_of_statement_is_not_a_baseline(tmp_path: Path) -> None:
    signer = Signer.generate_ephemeral()
    path = write(tmp_path, signer)
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicateType"] = "https://in-toto.io/attestation/test-result/v0.1"
    payload = json.dumps(statement).encode()
    path.write_bytes(signer.sign(PAYLOAD_TYPE, payload).to_json())
    with pytest.raises(BaselineUsageError, match="not a baseline"):
        load(path)


def test_an_observation_that_does_not_match_its_subject_is_refused(tmp_path: Path) -> None:
    signer = Signer.generate_ephemeral()
    path = write(tmp_path, signer)
    statement = json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))
    statement["predicate"]["observation"]["slices"][0]["capacityGpuHours"] = 2.0
    path.write_bytes(signer.sign(PAYLOAD_TYPE, json.dumps(statement).encode()).to_json())
    with pytest.raises(NotVerified, match="digest does not match its subject"):
        load(path)


class FakeClock:
    """Wall time that moves only when the observer sleeps."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept = 0.0

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


class FakeSource:
    kind, settle, description = "fake", 2.0, "the fake source"

    def __init__(self, clock: FakeClock, fail_at: int | None = None) -> None:
        self.clock, self.fail_at, self.reads = clock, fail_at, []

    def read(self, start: float, end: float) -> LeakReading:
        assert self.clock.now >= end + self.settle, "a slice is read only once it is over and settled"
        self.reads.append((start, end))
        if self.fail_at is not None and len(self.reads) == self.fail_at:
            raise ReportUnavailable("answered 503")
        hours = (end - start) / 3600 * 8
        return LeakReading(start=str(start), end=str(end), capacity_gpu_hours=hours,
                           layers={"allocated": (hours / 2, 0.5), "active": (hours / 4, 0.25),
                                   "effective": (hours / 10, 0.1)},
                           holes=tuple((h, 0.001, 0.0) for h in HOLES), largest=None, summary="",
                           raw={"kind": "LeakReport"}, unmeasured={})


def test_a_day_long_window_is_read_slice_by_slice_on_an_injected_clock() -> None:
    clock = FakeClock(1_000_000.0)
    source = FakeSource(clock)
    lines: list[str] = []
    window = Window(clock.now, 86_400.0, 24)
    got, unmeasured = observe(source, window, clock=clock, sleep=clock.sleep, progress=lines.append)
    assert len(got) == 24 and unmeasured == {}
    assert source.reads[0] == (1_000_000.0, 1_003_600.0) and source.reads[-1][1] == window.end
    assert clock.now == pytest.approx(window.end + source.settle)
    slice_lines = [line for line in lines if "slice" in line and "[" in line]
    assert len(slice_lines) == 24 and "allocated 50.0 %, active 25.0 %, effective 10.0 %" in slice_lines[0]
    heartbeats = [line for line in lines if line.startswith("  window ")]
    assert heartbeats and "% (" in heartbeats[0]


def test_a_slice_that_cannot_be_read_stops_the_baseline_naming_the_slice() -> None:
    clock = FakeClock(0.0)
    with pytest.raises(ObservationError, match=r"slice 2 of 3 .* could not be read from the fake source: answered 503"):
        observe(FakeSource(clock, fail_at=2), Window(0.0, 30.0, 3), clock=clock, sleep=clock.sleep)


def test_the_default_mix_round_trips_through_its_file_form() -> None:
    assert parse_mix(DEFAULT_MIX.to_dict(), "default") == DEFAULT_MIX
    assert DEFAULT_MIX.gpus == 10 and DEFAULT_MIX.pods == 3


def test_a_mix_file_with_mistakes_lists_every_one_with_its_field() -> None:
    with pytest.raises(BaselineUsageError) as caught:
        parse_mix({"name": "m", "kind": "Mix", "training": [{"name": "a", "workers": 0, "gpusPerWorker": 4,
                                                             "computeSeconds": 0.1, "inputSecs": 1}],
                   "idle": [{"name": "a", "gpus": 1}]}, "mix.yaml")
    text = str(caught.value)
    for says in ("kind: 'Mix', expected WorkloadMix", "training[0].workers: 0 is not a whole number of at least 1",
                 "training[0].inputSecs: unknown field", "idle[0].name: 'a' is used twice"):
        assert says in text
    with pytest.raises(BaselineUsageError, match="runs nothing"):
        parse_mix({"name": "empty"}, "mix.yaml")
