"""Declared vs. discovered hardware, and replica layout checks."""

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._cluster import (
    _check_workload,
    check_replica_layout,
    replica_gpu_usage,
    resolve_node,
    resolve_nodes,
)

MIB = 1024 * 1024
DECLARED_H100 = {"count": 4, "sku": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "islands": [[0, 1, 2, 3]]}


def _facts(count, sku="NVIDIA H200", memory=143771, mig=False):
    gpus = [{"index": i, "name": sku, "memory_total_mib": memory} for i in range(count)]
    return {"source": "nvml", "gpu_count": count, "skus": sorted({sku}), "gpus": gpus, "mig_enabled": mig,
            "driver_version": "580.159.04"}


def test_declared_only_node():
    node, errors = resolve_node({"name": "gpu-a", "declared": DECLARED_H100})
    assert errors == []
    assert node == {"name": "gpu-a", "source": "declared", "mig_enabled": False, "gpu_count": 4,
                    "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_memory_bytes": 81559 * MIB, "islands": [[0, 1, 2, 3]]}


def test_facts_win_and_topology_islands_are_used():
    topology = {"islands": [[0]]}
    node, errors = resolve_node({"name": "h", "declared": {}, "facts": _facts(1), "topology": topology})
    assert errors == []
    assert (node["source"], node["gpu_count"], node["gpu_name"], node["gpu_memory_bytes"], node["islands"]) == \
        ("facts", 1, "NVIDIA H200", 143771 * MIB, [[0]])
    assert node["driver_version"] == "580.159.04"


def test_count_and_sku_mismatch_name_the_variable():
    _node, errors = resolve_node({"name": "gpu-a", "declared": DECLARED_H100, "facts": _facts(8)})
    assert errors == [
        "node gpu-a: vllm_cluster_node_gpus.count is 4 but the host reports 8 GPUs "
        "(set vllm_cluster_node_gpus in host_vars/gpu-a or group_vars)",
        "node gpu-a: GPU SKU mismatch: vllm_cluster_node_gpus.sku is 'NVIDIA H100 80GB HBM3' but the host reports "
        "'NVIDIA H200' (set vllm_cluster_node_gpus in host_vars/gpu-a or group_vars)",
    ]


def test_mixed_skus_in_one_node():
    facts = _facts(2)
    facts["skus"] = ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]
    facts["gpus"][1]["memory_total_mib"] = 40960
    node, errors = resolve_node({"name": "mixed", "facts": facts})
    assert "mixes GPU models (NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3)" in errors[0]
    assert node["gpu_memory_bytes"] == 40960 * MIB  # the smallest GPU bounds every TP rank


def test_no_gpu_and_no_declaration_names_missing_keys():
    node, errors = resolve_node({"name": "cpu1", "declared": {"count": 1},
                                 "facts": {"gpu_count": 0, "reason": "no nvidia-smi on PATH"}})
    assert node is None
    assert errors == ["node cpu1: no GPU found (no nvidia-smi on PATH) and vllm_cluster_node_gpus lacks sku, memory_mib "
                      "(set vllm_cluster_node_gpus in host_vars/cpu1 or group_vars)"]


def test_empty_group():
    assert resolve_nodes([], "gpus") == ({}, ["inventory group gpus is empty or missing: put the GPU hosts in it, "
                                              "or set preflight_node_group"])


def _nodes(**counts):
    return {name: {"name": name, "gpu_count": count} for name, count in counts.items()}


def test_gpu_usage_counts_pp_inside_one_host():
    replicas = [{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
                {"name": "b", "hosts": ["n1", "n2"], "tensor_parallel_size": 4, "pipeline_parallel_size": 2}]
    assert replica_gpu_usage(replicas) == {"n1": [("a", 4), ("b", 4)], "n2": [("b", 4)]}


def test_layout_ok():
    replicas = [{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 4, "pipeline_parallel_size": 1},
                {"name": "b", "hosts": ["n1"], "tensor_parallel_size": 4, "pipeline_parallel_size": 1, "port": 8001}]
    assert check_replica_layout(replicas, _nodes(n1=8), {"n1": {"8080": "HAProxy"}}) == []


@pytest.mark.parametrize("replicas, expected", [
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 4}],
     "vllm_cluster_replicas[0] (a) lacks pipeline_parallel_size"),
    ([{"name": "a", "hosts": ["n9"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1}],
     "vllm_cluster_replicas[0] (a): host n9 is not a resolved GPU node; add it to the node group or fix the name"),
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1}] * 2,
     "vllm_cluster_replicas: name a is used twice; give every replica its own name"),
    ([{"name": "a", "hosts": ["n1", "n2"], "tensor_parallel_size": 4, "pipeline_parallel_size": 3}],
     "vllm_cluster_replicas[0] (a): pipeline_parallel_size=3 but 2 hosts listed; one PP stage per host, so list exactly "
     "pipeline_parallel_size hosts (or one host for PP inside a node)"),
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 8, "pipeline_parallel_size": 1},
      {"name": "b", "hosts": ["n1"], "tensor_parallel_size": 4, "pipeline_parallel_size": 1}],
     "host n1 has 8 GPUs but replicas a, b need 12 there; lower tensor_parallel_size or move a replica in "
     "vllm_cluster_replicas"),
    ([{"name": "a", "hosts": ["n1", "n3"], "tensor_parallel_size": 4, "pipeline_parallel_size": 2}],
     "vllm_cluster_replicas[0] (a).tensor_parallel_size=4 is larger than the 2 GPU(s) of n3: a TP group never crosses "
     "nodes; use tensor_parallel_size<=2 and pipeline stages across nodes"),
    ([{"name": "a", "hosts": ["n3"], "tensor_parallel_size": 2, "pipeline_parallel_size": 2}],
     "vllm_cluster_replicas[0] (a): tp*pp=4 GPU workers but n3 has 2 GPU(s); lower pipeline_parallel_size or "
     "tensor_parallel_size, or list one host per pipeline stage"),
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "gpu": [0]}],
     "vllm_cluster_replicas[0] (a) has unknown key(s) gpu (a typo is silently ignored otherwise); known: name, hosts, "
     "tensor_parallel_size, pipeline_parallel_size, port, gpus"),
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "port": 8000},
      {"name": "b", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "port": 8000}],
     "vllm_cluster_replicas[1] (b): port 8000 on n1 is already taken by replica a; give each replica on a host its own "
     "port (vllm_cluster_replicas[1].port), or leave port out and the plan picks a free one"),
    ([{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "port": "http"}],
     "vllm_cluster_replicas[0] (a).port must be an integer port, got 'http'"),
])
def test_layout_errors(replicas, expected):
    assert expected in check_replica_layout(replicas, _nodes(n1=8, n2=8, n3=2))


def test_replica_on_a_reserved_port():
    replicas = [{"name": "a", "hosts": ["n1"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "port": 8080}]
    assert check_replica_layout(replicas, _nodes(n1=8), {"n1": {"8080": "HAProxy (loadbalancer_port)"}}) == [
        "vllm_cluster_replicas[0] (a): port 8080 on n1 is already taken by HAProxy (loadbalancer_port); give each "
        "replica on a host its own port (vllm_cluster_replicas[0].port), or leave port out and the plan picks a free one"]


def test_workload_typo_is_named():
    shape = {"max_model_len": 2048}
    assert _check_workload({"max_model_len": 1024, "concurrency": 4, "max_num_seq": 8}, shape) == [
        "vllm_cluster_workload has unknown key(s) max_num_seq (a typo is silently ignored otherwise); known: max_model_len, "
        "concurrency, prompt_tokens, output_tokens, cache_dtype"]
    assert _check_workload({"max_model_len": 1024, "concurrency": 4, "cache_dtype": "fp8"}, shape) == []
