"""The /metrics text: vLLM's names, Prometheus's exposition format, cumulative buckets, the model label."""

from __future__ import annotations

import math

import pytest

from drills.inference.metrics import Histogram, Metrics, number, parse_samples

L = 'model_name="m1"'


def rendered() -> str:
    m = Metrics("m1", received=7, served=4)
    for ttft in (0.004, 0.05, 0.05, 3.0):
        m.ttft.observe(ttft)
    for gap in (0.01, 0.02, 99.0):
        m.tpot.observe(gap)
    return m.render(waiting=2, running=3)


def test_gauges_and_counters_carry_vllms_names_and_the_model_label() -> None:
    s = parse_samples(rendered())
    assert s[f"vllm:num_requests_waiting{{{L}}}"] == 2
    assert s[f"vllm:num_requests_running{{{L}}}"] == 3
    assert s[f"vllm:request_success_total{{{L}}}"] == 4
    assert s[f"firedrill_inference_requests_served_total{{{L}}}"] == 4
    assert s[f"firedrill_inference_requests_received_total{{{L}}}"] == 7


def test_histogram_buckets_are_cumulative_and_end_in_inf_equal_to_count() -> None:
    s = parse_samples(rendered())
    name = "vllm:time_to_first_token_seconds"
    assert s[f'{name}_bucket{{{L},le="0.005"}}'] == 1
    assert s[f'{name}_bucket{{{L},le="0.04"}}'] == 1
    assert s[f'{name}_bucket{{{L},le="0.06"}}'] == 3
    assert s[f'{name}_bucket{{{L},le="2.5"}}'] == 3
    assert s[f'{name}_bucket{{{L},le="5"}}'] == 4
    assert s[f'{name}_bucket{{{L},le="+Inf"}}'] == s[f"{name}_count{{{L}}}"] == 4
    assert s[f"{name}_sum{{{L}}}"] == pytest.approx(3.104)
    tpot = "vllm:time_per_output_token_seconds"
    assert s[f'{tpot}_bucket{{{L},le="0.01"}}'] == 1  # le is inclusive
    assert s[f'{tpot}_bucket{{{L},le="5"}}'] == 2 and s[f'{tpot}_bucket{{{L},le="+Inf"}}'] == 3
    buckets = [v for k, v in s.items() if k.startswith(f"{name}_bucket")]
    assert buckets == sorted(buckets)


def test_every_family_has_help_and_type_before_its_samples() -> None:
    lines = rendered().splitlines()
    types = {line.split()[2]: line.split()[3] for line in lines if line.startswith("# TYPE ")}
    assert types == {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
                     "vllm:time_to_first_token_seconds": "histogram",
                     "vllm:time_per_output_token_seconds": "histogram", "vllm:request_success_total": "counter",
                     "firedrill_inference_requests_received_total": "counter",
                     "firedrill_inference_requests_served_total": "counter"}
    seen: set[str] = set()
    for line in lines:
        if line.startswith("# TYPE "):
            seen.add(line.split()[2])
        elif not line.startswith("#"):
            family = line.split("{")[0].removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            assert family in seen, line
    assert rendered().endswith("\n")


def test_label_values_are_escaped() -> None:
    text = Metrics('a"b\\c').render(0, 0)
    assert 'model_name="a\\"b\\\\c"' in text


def test_numbers_are_written_as_prometheus_reads_them() -> None:
    assert [number(v) for v in (math.inf, 3, 3.0, 0.25, 1e-3)] == ["+Inf", "3", "3", "0.25", "0.001"]


def test_bounds_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Histogram((0.5, 0.1))
