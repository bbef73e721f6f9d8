"""The acceptance role's helpers that run on the hosts: loadgen (ladder, stop rule, /metrics parsing),
probe (HAProxy CSV) and fault (victim choice). Standard library only, as on the hosts."""

import importlib.util
import io
import os

import pytest

FILES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "acceptance", "files")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(FILES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


loadgen, probe, fault = _load("loadgen"), _load("probe"), _load("fault")

METRICS = """# HELP vllm:num_requests_waiting Number of requests waiting.
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 3.0
vllm:num_requests_waiting{engine="1",model_name="tiny-llama"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.125
vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 4096.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny-llama"} 1.5
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="tiny-llama"} 7.0
vllm:cache_config_info{block_size="16"} 1.0
"""


def test_prometheus_series_are_summed_over_label_sets_and_others_ignored():
    values = loadgen.parse_prometheus(METRICS)
    assert values == {"vllm:num_requests_waiting": 5.0, "vllm:kv_cache_usage_perc": 0.125,
                      "vllm:generation_tokens_total": 4096.0, "vllm:request_queue_time_seconds_sum": 1.5}


def test_a_ladder_expands_to_one_step_per_level_with_enough_prompts():
    steps = loadgen.expand_steps({"ladder": {"concurrency": [1, 4, 16], "input_len": 64, "output_len": 16,
                                             "prompts_per_slot": 2, "min_prompts": 6}})
    assert [(s["name"], s["concurrency"], s["num_prompts"]) for s in steps] == [("c1", 1, 6), ("c4", 4, 8), ("c16", 16, 32)]
    assert loadgen.expand_steps({"steps": [{"name": "x"}]}) == [{"name": "x"}]


@pytest.mark.parametrize("bench, returncode, expected", [
    ({"p95_ttft_ms": 100.0, "p95_itl_ms": 10.0}, 0, ""),
    ({"p95_ttft_ms": 900.0, "p95_itl_ms": 10.0}, 0, "p95_ttft_ms 900.0 > 500"),
    ({"p95_ttft_ms": 100.0, "p95_itl_ms": 90.0}, 0, "p95_itl_ms 90.0 > 50"),
    ({}, 1, "bench exited 1"),
])
def test_the_ladder_stops_at_the_first_step_over_a_limit(bench, returncode, expected):
    assert loadgen.breaks({"bench": bench, "returncode": returncode}, {"p95_ttft_ms": 500, "p95_itl_ms": 50}) == expected


def test_errors_are_counted_by_their_last_line():
    errors = ["", "Traceback\naiohttp.ClientConnectorError: refused", "x\naiohttp.ClientConnectorError: refused", "timeout"]
    assert loadgen.summarize_errors(errors) == [{"error": "aiohttp.ClientConnectorError: refused", "count": 2},
                                                {"error": "timeout", "count": 1}]


def test_haproxy_csv_status_of_one_server(monkeypatch):
    csv_text = ("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status\n"
                "vllm_replicas,r0,0,0,0,1,,5,0,0,,0,,0,0,0,0,UP\n"
                "vllm_replicas,r1,0,0,0,1,,3,0,0,,0,,0,0,0,0,DOWN 1/2\n")
    monkeypatch.setattr(probe.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(csv_text.encode()))
    assert probe.server_status("http://127.0.0.1:8404/stats", "r1") == (True, "DOWN 1/2")
    assert probe.server_status("http://127.0.0.1:8404/stats", "r9") == (False, "no server r9")


def test_wait_returns_when_reached_and_stops_at_the_timeout():
    answers = iter([(False, "starting"), (True, "200")])
    reached = probe.wait(lambda: next(answers), lambda ok, _detail: ok, timeout=5)
    assert reached["reached"] and reached["attempts"] == 2
    never = probe.wait(lambda: (False, "refused"), lambda ok, _detail: ok, timeout=0.3)
    assert not never["reached"] and never["detail"] == "refused"


def test_the_fault_prefers_a_worker_then_the_engine_core(monkeypatch):
    tree = {10: [11], 11: [12, 13], 12: [], 13: []}
    names = {10: "vllm", 11: "VLLM::EngineCor", 12: "VLLM::Worker_TP", 13: "VLLM::Worker_TP"}
    monkeypatch.setattr(fault, "children", lambda pid: tree[pid])
    monkeypatch.setattr(fault, "comm", lambda pid: names[pid])
    assert fault.victim(10) == 12
    names[12] = names[13] = "python3"
    assert fault.victim(10) == 11
    names[11] = "python3"
    assert fault.victim(10) == 10


def test_a_step_can_skip_the_bench_initial_test_the_failure_stage_would_break():
    spec = {"bench": ["vllm", "bench", "serve"], "base_url": "http://lb:8080", "model": "m", "tokenizer": "/t"}
    step = {"input_len": 32, "output_len": 16, "num_prompts": 30, "request_rate": 1}
    default = loadgen.bench_argv(spec, step, "s.json", "/out")
    assert default[default.index("--ready-check-timeout-sec") + 1] == "60"
    skipped = loadgen.bench_argv(dict(spec, ready_check_timeout_s="0"), step, "s.json", "/out")
    assert skipped[skipped.index("--ready-check-timeout-sec") + 1] == "0"
    assert skipped[skipped.index("--request-rate") + 1] == "1" and "--max-concurrency" not in skipped
