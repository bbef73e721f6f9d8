"""The five failure patterns: each is named from the evidence that shows it, and not from a healthy cluster's."""

import copy
import json
import os

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _troubleshoot as t

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "haproxy")
HEALTHY_METRICS = "vllm:kv_cache_usage_perc{engine=\"0\"} 0.12\nvllm:num_requests_waiting{engine=\"0\"} 0.0\n"


def node(address, ifname="eth1", **extra):
    raw = {
        "cluster_address": address,
        "captures": {
            "addresses.json": json.dumps([{"ifname": "lo", "addr_info": [{"local": "127.0.0.1"}]},
                                          {"ifname": ifname, "addr_info": [{"local": address}]}]),
            "network.env": "NCCL_SOCKET_IFNAME==%s\nGLOO_SOCKET_IFNAME=%s\nVLLM_HOST_IP=%s\n" % (ifname, ifname, address),
            "firewall.nft": "table inet llmserve {\n set cluster_v4 {\n  elements = { 10.0.0.11-10.0.0.13 }\n }\n}",
            "units.txt": "ray.service loaded active running Ray\nvllm-r0.service loaded active running vLLM\n",
            "journal.txt": "INFO engine started\nINFO world_size=2 rank=0 distributed_init_method=tcp://10.0.0.11:29501 backend=gloo\n",
            "gpus.csv": "0, NVIDIA H200, 143771, 100000, 0\n",
        },
        "model": {"path": "/srv/vllm-cache/models/m/abc", "verified": True, "message": ""},
        "metrics": {},
        "ray": "",
    }
    raw.update(extra)
    return raw


def healthy():
    return {
        "plan": {"replicas": [{"name": "r0", "hosts": ["n1", "n2"], "tensor_parallel_size": 1, "pipeline_parallel_size": 2},
                              {"name": "r1", "hosts": ["n3"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1}]},
        "nodes": {"n1": node("10.0.0.11", ray=json.dumps({"alive": ["10.0.0.11", "10.0.0.12", "10.0.0.13"]}),
                             metrics={"r0": HEALTHY_METRICS}),
                  "n2": node("10.0.0.12"),
                  "n3": node("10.0.0.13", metrics={"r1": HEALTHY_METRICS})},
        "loadbalancer": {"backend": "vllm_replicas", "direct": {"r0": 200, "r1": 200}, "through_lb": 200,
                         "stat_csv": "# pxname,svname,scur,status,check_status,econ,eresp,wretr,wredis,hrsp_5xx\n"
                                     "vllm_replicas,r0,0,UP,L7OK,0,0,0,0,0\nvllm_replicas,r1,1,UP,L7OK,0,0,0,0,0\n"},
    }


CONFIG = ("defaults\n    timeout connect 1s\n    timeout client 10m\n    timeout server 10m\n    timeout check 20s\n"
          "backend vllm_replicas\n    option http-no-delay\n")


def likely(evidence, config=CONFIG):
    return {entry["pattern"]: entry for entry in t.analyse(t.normalize(evidence, config)) if entry["likely"]}


def test_healthy_cluster_points_nowhere_but_cross_node_pipeline():
    found = likely(healthy())
    # r0 runs pp=2 across two nodes in this plan: a real (advisory) cause of "more GPUs slower", nothing else.
    assert sorted(found) == ["more_gpus_slower"]
    assert "pipeline parallelism across 2 nodes" in found["more_gpus_slower"]["findings"][0]


def test_multi_node_hang_names_ray_interface_rank_model_and_firewall():
    evidence = healthy()
    n1 = evidence["nodes"]["n1"]
    n1["ray"] = json.dumps({"alive": ["10.0.0.11", "10.0.0.13"]})
    n2 = evidence["nodes"]["n2"]["captures"]
    n2["network.env"] = "NCCL_SOCKET_IFNAME==ib0\nGLOO_SOCKET_IFNAME=ib0\nVLLM_HOST_IP=10.0.0.99\n"
    n2["units.txt"] = "ray.service loaded active running Ray\nvllm-r0.service loaded failed failed vLLM\n"
    n2["firewall.nft"] = "table inet llmserve {\n set cluster_v4 {\n  elements = { 10.0.0.12, 10.0.5.0/24 }\n }\n}"
    n2["journal.txt"] = ("INFO backend=gloo\nvllm[1]: ERROR RuntimeError: [gloo/transport/tcp/pair.cc:553] "
                         "Connection closed by peer [10.0.0.11]:47799\n")
    evidence["nodes"]["n2"]["model"] = {"path": "/srv/m", "verified": False, "message": "cannot read model directory /srv/m"}
    findings = "\n".join(likely(evidence)["multi_node_hang"]["findings"])
    for text in ("n2 not alive in the Ray cluster", "interface ib0 does not exist", "VLLM_HOST_IP=10.0.0.99",
                 "its ranks differ", "model path /srv/m on n2", "does not admit its peer(s) 10.0.0.11",
                 "n2: its vLLM/Ray log says: vllm[1]: ERROR RuntimeError"):
        assert text in findings


def test_one_gpu_oom_from_memory_and_logs():
    evidence = healthy()
    evidence["nodes"]["n3"]["captures"]["gpus.csv"] = "0, NVIDIA H200, 143771, 142900, 99\n"
    evidence["nodes"]["n3"]["captures"]["journal.txt"] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate\n"
    findings = "\n".join(likely(evidence)["one_gpu_oom"]["findings"])
    assert "n3 GPU 0: 142900 of 143771 MiB used" in findings and "CUDA out of memory. Tried to allocate" in findings
    assert "uneven across GPUs" in findings


def test_long_prompt_latency_reads_kv_pressure_by_prompt_bucket():
    evidence = healthy()
    evidence["nodes"]["n3"]["metrics"]["r1"] = (
        'vllm:kv_cache_usage_perc{engine="0"} 0.97\nvllm:num_requests_waiting{engine="0"} 6\n'
        'vllm:num_preemptions_total{engine="0"} 3\n'
        'vllm:request_prompt_tokens_bucket{le="128.0"} 10\nvllm:request_prompt_tokens_bucket{le="8192.0"} 14\n'
        'vllm:request_prompt_tokens_bucket{le="+Inf"} 14\n')
    findings = likely(evidence)["long_prompt_latency"]["findings"]
    assert findings[:3] == ["replica r1: KV cache 97% full", "replica r1: 6 request(s) waiting in vLLM's queue",
                            "replica r1: 3 preemption(s) (KV cache pressure evicts running requests)"]
    assert findings[3].endswith("128.0: 10, 8192.0: 4")


def test_lb_only_failure_from_states_counters_and_timeouts():
    evidence = healthy()
    with open(os.path.join(FIXTURES, "show-stat-down.txt")) as handle:
        evidence["loadbalancer"]["stat_csv"] = handle.read()
    evidence["loadbalancer"]["through_lb"] = 503
    short = CONFIG.replace("timeout server 10m", "timeout server 30s")
    findings = "\n".join(likely(evidence, short)["lb_only_failure"]["findings"])
    assert "HAProxy has r0 DOWN (check: L7STS) while it answers directly" in findings
    assert "timeout server is 30 s" in findings and "answers 503, directly 200" in findings


def test_a_balancer_that_corks_streams_is_named():
    corked = CONFIG.replace("    option http-no-delay\n", "")
    assert "lb_only_failure" not in likely(healthy())
    findings = likely(healthy(), corked)["lb_only_failure"]["findings"]
    assert findings == ["HAProxy lacks option http-no-delay: it corks streamed tokens up to 200 ms "
                        "(TTFT through the balancer above direct, tokens in bursts)"]


def test_sku_mismatch_and_disabled_nccl_paths_make_more_gpus_slower():
    evidence = healthy()
    evidence["nodes"]["n2"]["captures"]["gpus.csv"] = "0, NVIDIA H100 80GB HBM3, 81559, 1000, 0\n"
    evidence["nodes"]["n1"]["captures"]["network.env"] += "NCCL_P2P_DISABLE=1\n"
    findings = "\n".join(likely(evidence)["more_gpus_slower"]["findings"])
    assert "replica r0 mixes GPU SKUs (NVIDIA H100 80GB HBM3, NVIDIA H200)" in findings
    assert "n1: NCCL_P2P_DISABLE=1" in findings


def test_failed_probes_are_evidence_not_crashes():
    evidence = healthy()
    raw = copy.deepcopy(evidence["nodes"]["n2"])
    raw["captures"] = {name: "failed (rc 1): nope" for name in raw["captures"]}
    raw["errors"] = ["planning failed: TP 8 exceeds the GPUs per node"]
    evidence["nodes"]["n2"] = raw
    normalized = t.normalize(evidence, CONFIG)["nodes"]["n2"]
    assert normalized["interfaces"] == {} and normalized["units"] == {} and normalized["gpus"] == []
    assert "planning failed: TP 8 exceeds the GPUs per node" in "\n".join(likely(evidence)["multi_node_hang"]["findings"])


def test_timeouts_and_markdown():
    assert t.haproxy_timeouts(CONFIG) == {"connect": 1, "client": 600, "server": 600, "check": 20}
    assert t.parse_timeout("500ms") == 0.5 and t.parse_timeout("30") == 0.03 and t.parse_timeout("x") is None
    text = t.render_markdown(t.analyse(t.normalize(healthy(), CONFIG)), "bundle-1")
    assert text.startswith("# Troubleshooting summary (bundle-1)\n\nLikely: More GPUs made it slower")
    assert "## One GPU runs out of memory: not indicated" in text


def test_a_node_without_evidence_is_named():
    evidence = healthy()
    evidence["nodes"]["n2"] = {}
    findings = "\n".join(likely(evidence)["multi_node_hang"]["findings"])
    assert "n2: no evidence collected" in findings
