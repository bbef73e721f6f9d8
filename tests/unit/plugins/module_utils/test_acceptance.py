"""The acceptance report's arithmetic: bench summaries, /metrics deltas, the knee, the gates, the renderings."""

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _acceptance as a

SLO = {"p95_ttft_ms": 500.0, "p95_itl_ms": 50.0, "max_error_rate": 0.01, "min_output_tokens_per_s_per_replica": 10.0,
       "min_gpu_memory_headroom_pct": 5.0}


def _step(concurrency, p95_ttft, p95_itl=10.0, throughput=100.0, failed=0, returncode=0):
    bench = {"completed": 10 - failed, "failed": failed, "duration": 5.0, "output_throughput": throughput,
             "request_throughput": 2.0, "median_ttft_ms": p95_ttft / 2, "p95_ttft_ms": p95_ttft, "p99_ttft_ms": p95_ttft * 1.1,
             "median_itl_ms": p95_itl / 2, "p95_itl_ms": p95_itl, "p95_tpot_ms": 9.0, "p95_e2el_ms": 900.0}
    return {"name": "c%d" % concurrency, "concurrency": concurrency, "input_len": 128, "output_len": 64, "num_prompts": 10,
            "returncode": returncode, "bench": bench if returncode == 0 else {},
            "metrics": {"r0": {"first": {"time": 0.0, "vllm:generation_tokens_total": 100.0,
                                         "vllm:request_queue_time_seconds_sum": 1.0, "vllm:request_queue_time_seconds_count": 10.0},
                               "last": {"time": 5.0, "vllm:generation_tokens_total": 600.0,
                                        "vllm:request_queue_time_seconds_sum": 3.0, "vllm:request_queue_time_seconds_count": 20.0},
                               "max": {"vllm:num_requests_waiting": 3.0, "vllm:kv_cache_usage_perc": 0.25}, "samples": 6, "errors": 0}}}


def test_replica_metrics_are_deltas_over_the_step():
    server = a.step_summary(_step(4, 100.0))["replicas"]["r0"]
    assert server["output_tokens_per_s"] == 100.0
    assert server["queue_time_mean_s"] == 0.2
    assert server["waiting_max"] == 3.0 and server["kv_cache_usage_max"] == 0.25


def test_replica_tokens_per_s_are_over_the_loads_own_window():
    step = _step(4, 100.0)
    step["metrics"]["r0"]["last"]["time"] = 20.0   # scraped from before the client started to after it ended
    assert a.step_summary(step)["replicas"]["r0"]["output_tokens_per_s"] == 100.0   # 500 tokens over the 5 s load
    step["bench"] = {}
    assert a.step_summary(step)["replicas"]["r0"]["output_tokens_per_s"] == 25.0    # no bench: the scrape window


def test_the_report_names_the_versions_the_hosts_run():
    topology = {"hosts": {"n1": {"versions": {"vllm": "0.26.0", "ray": "2.60.0"}},
                          "n2": {"versions": {"vllm": "0.26.0", "ray": ""}}}}
    report = a.build_report({"topology": topology}, SLO, {"replicas": [], "vllm_version": "0.26.0"}, "x")
    assert report["cluster"]["vllm_version"] == "0.26.0" and report["cluster"]["ray_version"] == "2.60.0"
    unpinned = a.build_report({}, SLO, {"replicas": []}, "x")
    assert "vLLM (unknown), Ray (unknown)" in a.render_markdown(unpinned, {})
    mixed = {"hosts": {"n1": {"versions": {"vllm": "0.26.0"}}, "n2": {"versions": {"vllm": "0.27.0"}}}}
    assert a.build_report({"topology": mixed}, SLO, {"replicas": []}, "x")["cluster"]["vllm_version"] == "0.26.0, 0.27.0"


def test_the_knee_is_the_last_step_before_the_first_broken_one():
    summary = {"steps": [a.step_summary(_step(c, ttft)) for c, ttft in ((1, 100.0), (2, 200.0), (4, 450.0), (8, 900.0))]}
    sweep = a.sweep_analysis(summary, {"p95_ttft_ms": 500.0, "p95_itl_ms": 50.0}, replica_count=2)
    assert sweep["knee_concurrency"] == 4 and sweep["broken_at"] == 8 and sweep["limit_reached"]
    assert sweep["knee_output_tokens_per_s_per_replica"] == 50.0
    assert sweep["broken_because"] == ["p95 TTFT 900.0 ms > 500.0 ms"]
    assert [step["passed"] for step in sweep["ladder"]] == [True, True, True, False]


def test_itl_also_breaks_the_ladder_and_a_failed_first_step_leaves_no_knee():
    summary = {"steps": [a.step_summary(_step(1, 100.0, p95_itl=80.0))]}
    sweep = a.sweep_analysis(summary, {"p95_ttft_ms": 500.0, "p95_itl_ms": 50.0}, 1)
    assert sweep["knee_concurrency"] is None and sweep["broken_because"] == ["p95 ITL 80.0 ms > 50.0 ms"]
    crashed = a.sweep_analysis({"steps": [a.step_summary(_step(1, 0.0, returncode=1))]}, {"p95_ttft_ms": 500.0}, 1)
    assert crashed["knee_concurrency"] is None and crashed["broken_because"] == ["the load did not run (exit 1)"]


def test_a_ladder_that_never_breaks_says_so():
    summary = {"steps": [a.step_summary(_step(c, 100.0)) for c in (1, 2)]}
    sweep = a.sweep_analysis(summary, {"p95_ttft_ms": 500.0, "p95_itl_ms": 50.0}, 1)
    assert sweep["knee_concurrency"] == 2 and not sweep["limit_reached"]


def _stages():
    return {
        "cold_load": {"replicas": {"r0": {"ready": True, "seconds": 50.2}}},
        "short_prompt": {"cluster": {"target": "lb", "steps": [_step(4, 300.0)]}},
        "sweep": {"cluster": {"steps": [_step(1, 100.0), _step(2, 800.0)]},
                  "gpu_memory": {"node1": [{"memory_total_mib": 1000, "memory_used_mib": 900}]}},
        "failure": {"faults": [{"kind": "kill", "replica": "r1", "host": "node3", "fault": {"at": 1.0, "process": "VLLM::EngineCor"},
                                "dropped": True, "drop_s": 2.5, "restored": True, "restore_s": 60.0, "recovery": "systemd",
                                "load": {"steps": [_step(0, 100.0, failed=2)]}}]},
    }


def test_gates_fail_the_report_and_name_the_stage():
    cluster = {"replicas": [{"name": "r0"}, {"name": "r1"}]}
    report = a.build_report(_stages(), SLO, cluster, "20261203T000000Z")
    gates = {gate["name"]: gate for gate in report["gates"]}
    assert gates["short_prompt p95 TTFT ms"]["passed"] is True
    assert gates["GPU memory headroom %"]["passed"] is True and gates["GPU memory headroom %"]["value"] == 10.0
    assert gates["kill r1: load balancer dropped it"]["passed"] is True
    assert gates["kill r1: other replicas kept serving"]["passed"] is True
    assert gates["output tok/s per replica at the knee"]["value"] == 50.0
    assert report["stage_verdicts"]["restart"] == "not run"
    assert report["verdict"] == "pass"
    slow = dict(SLO, p95_ttft_ms=250.0)
    failed = a.build_report(_stages(), slow, cluster, "x")
    assert failed["verdict"] == "fail" and failed["stage_verdicts"]["short_prompt"] == "fail"


def test_no_gpus_makes_the_headroom_gate_not_applicable():
    stages = _stages()
    stages["sweep"]["gpu_memory"] = {"node1": []}
    report = a.build_report(stages, SLO, {"replicas": []}, "x")
    gate = [g for g in report["gates"] if g["name"] == "GPU memory headroom %"][0]
    assert gate["passed"] is None and gate["detail"] == "no GPUs on these hosts"


def test_renderings_carry_the_verdict_tables_and_plots():
    report = a.build_report(_stages(), SLO, {"replicas": [{"name": "r0"}], "model": "m"}, "RUN1")
    markdown = a.render_markdown(report, {"TTFT vs concurrency": "ttft.png"})
    assert markdown.startswith("# vLLM acceptance report RUN1: PASS")
    assert "## sweep (cluster), knee at concurrency 1" in markdown and "![TTFT vs concurrency](ttft.png)" in markdown
    page = a.render_html(report, {"TTFT vs concurrency": "ttft.png"})
    assert "<img src='ttft.png'" in page and "failure under load" in page


def test_a_slow_drop_fails_the_failure_gate():
    stages = _stages()
    stages["failure"]["faults"][0]["drop_s"] = 90.0
    report = a.build_report(stages, dict(SLO, max_drop_s=60.0), {"replicas": [{"name": "r0"}, {"name": "r1"}]}, "x")
    gate = [g for g in report["gates"] if g["name"] == "kill r1: load balancer dropped it"][0]
    assert gate["passed"] is False and gate["limit"] == 60.0 and report["stage_verdicts"]["failure"] == "fail"
