"""GPU and port assignment per replica, on the real 8-GPU topology captures (tests/fixtures/gpu/public)."""

import os

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._cluster import plan_cluster
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._placement import assign_gpus, assign_ports, unit_gpus
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._topology import parse_topo_matrix

PUBLIC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu", "public")
NVSWITCH = "01_h100_8gpu_nv18_stas00.txt"     # 8 x H100 SXM, one NVSwitch island
PAIRS = "07_rtxa6000_8gpu_nv4pairs_unige.txt"  # 8 x RTX A6000, NVLink bridges in pairs
PCIE = "08_rtx4090_8gpu_pcie_pix_sys_gooxi.txt"  # 8 x RTX 4090, PCIe only
LLAMA8 = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
              num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, torch_dtype="bfloat16")


def _topology(capture):
    with open(os.path.join(PUBLIC, capture)) as handle:
        return parse_topo_matrix(handle.read())


def _raw(name, capture, memory_mib=81559):
    declared = {"count": 8, "sku": "GPU", "memory_mib": memory_mib}
    return {"name": name, "declared": declared, "facts": None, "topology": _topology(capture)}


def _plan(captures, replicas, **options):
    params = {"model": {"config": LLAMA8}, "workload": {"max_model_len": 4096, "concurrency": 4},
              "nodes": [_raw(name, capture) for name, capture in captures.items()], "replicas": replicas,
              "node_group": "vllm_nodes", "reserved_ports": {}, "planner_options": options}
    return plan_cluster(params)


def _replicas(count, tp, hosts=("n1",), pp=1, **extra):
    return [dict({"name": "r%d" % i, "hosts": list(hosts), "tensor_parallel_size": tp, "pipeline_parallel_size": pp},
                 **extra) for i in range(count)]


def _gpus(result, host="n1"):
    return [replica["gpus"][host] for replica in result["replicas"]]


@pytest.mark.parametrize("count, tp, expected", [
    (8, 1, [[i] for i in range(8)]),
    (2, 4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (1, 8, [list(range(8))]),
    (4, 2, [[0, 1], [2, 3], [4, 5], [6, 7]]),
])
def test_nvswitch_node_gives_each_replica_its_own_gpus(count, tp, expected):
    result, errors = _plan({"n1": NVSWITCH}, _replicas(count, tp))
    assert errors == []
    assert _gpus(result) == expected
    assert [replica["port"] for replica in result["replicas"]] == list(range(8000, 8000 + count))
    assert result["hosts"]["n1"] == {"gpus": sorted(sum(expected, [])), "ray_gpus": []}


def test_pairs_capture_keeps_every_tp2_group_inside_one_nvlink_pair():
    islands = _topology(PAIRS)["islands"]
    result, errors = _plan({"n1": PAIRS}, _replicas(4, 2))
    assert errors == []
    assert all(group in islands for group in _gpus(result))
    assert result["warnings_found"] == []


def test_pairs_capture_refuses_tp4_since_no_island_holds_four():
    _result, errors = _plan({"n1": PAIRS}, _replicas(1, 4))
    assert errors == ["replica r0: node n1: TP=4 does not fit inside one NVLink island (largest has 2 GPUs); set "
                      "vllm_cluster_replicas.tensor_parallel_size<=2"]


def test_small_groups_fill_broken_islands_first():
    # Best fit: the tp1 replicas take GPUs of one pair, so three pairs stay whole for the tp2 replicas.
    replicas = _replicas(2, 1) + [dict(r, name="t%d" % i) for i, r in enumerate(_replicas(3, 2))]
    result, errors = _plan({"n1": PAIRS}, replicas)
    assert errors == []
    assert _gpus(result) == [[0], [1], [2, 3], [4, 5], [6, 7]]


def test_pcie_capture_warns_that_tp_crosses_pcie():
    result, errors = _plan({"n1": PCIE}, _replicas(2, 4))
    assert errors == []
    assert _gpus(result) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert "replica r0: node n1: TP=4 crosses PCIe (no NVLink); every token pays PCIe all-reduces" in result["warnings_found"]


def test_pcie_capture_refuses_tp_over_pcie_when_the_option_forbids_it():
    _result, errors = _plan({"n1": PCIE}, _replicas(2, 4), allow_tp_over_pcie=False)
    assert errors[0] == ("replica r0: node n1: TP=4 would cross PCIe (the node has no NVLink) and planner option "
                         "allow_tp_over_pcie is false; use tensor_parallel_size=1 and more replicas, or allow it")


def test_explicit_gpus_are_honoured_and_the_rest_fill_around_them():
    replicas = [dict(_replicas(1, 4)[0], gpus=[4, 5, 6, 7]), dict(_replicas(1, 4)[0], name="r1")]
    result, errors = _plan({"n1": NVSWITCH}, replicas)
    assert errors == []
    assert _gpus(result) == [[4, 5, 6, 7], [0, 1, 2, 3]]


@pytest.mark.parametrize("capture, replicas, expected", [
    (NVSWITCH, [dict(_replicas(1, 2)[0], gpus=[0, 1]), dict(_replicas(1, 2)[0], name="r1", gpus=[1, 2])],
     "vllm_cluster_replicas[1] (r1).gpus: GPU 1 on n1 is already given to replica r0; give each replica its own GPUs"),
    (PAIRS, [dict(_replicas(1, 2)[0], gpus=[1, 2])],
     "vllm_cluster_replicas[0] (r0).gpus on n1: TP group [1, 2] crosses NVLink islands ([0, 1]; [2, 3]; [4, 5]; [6, 7]); "
     "every tensor_parallel_size GPUs in a row must come from one island"),
    (NVSWITCH, [dict(_replicas(1, 2)[0], gpus=[0])],
     "vllm_cluster_replicas[0] (r0).gpus on n1 lists 1 GPU(s) but the replica runs 2 there (tensor_parallel_size x the "
     "pipeline stages on that host); list exactly 2"),
    (NVSWITCH, [dict(_replicas(1, 1)[0], gpus=[9])],
     "vllm_cluster_replicas[0] (r0).gpus on n1 names GPU(s) 9 but the host has GPUs 0-7"),
    (NVSWITCH, [dict(_replicas(1, 1)[0], gpus="0")],
     "vllm_cluster_replicas[0] (r0).gpus on n1 must be a list of GPU indices (or a dict of host to such a list), got '0'"),
])
def test_bad_explicit_gpus_are_refused_with_the_variable(capture, replicas, expected):
    _result, errors = _plan({"n1": capture}, replicas)
    assert expected in errors


def test_exhaustion_is_refused_before_placement():
    _result, errors = _plan({"n1": NVSWITCH}, _replicas(3, 4))
    assert errors == ["host n1 has 8 GPUs but replicas r0, r1, r2 need 12 there; lower tensor_parallel_size or move a "
                      "replica in vllm_cluster_replicas"]


def test_fragmented_islands_refuse_the_group_that_no_longer_fits():
    replicas = [dict(_replicas(1, 1)[0], gpus=[0]), dict(_replicas(1, 1)[0], name="r1", gpus=[2])] + \
        [dict(r, name="t%d" % i) for i, r in enumerate(_replicas(3, 2))]
    _result, errors = _plan({"n1": PAIRS}, replicas)
    assert errors == ["vllm_cluster_replicas[4] (t2): n1 has no 2 free GPU(s) inside one NVLink island left (free: [1, 3]; "
                      "islands: [0, 1]; [2, 3]; [4, 5]; [6, 7]; taken: r0=[0], r1=[2], t0=[4, 5], t1=[6, 7]); lower "
                      "tensor_parallel_size, move the replica to another host, or free GPUs with gpus: [...]"]


def test_pipeline_stages_take_one_group_per_host_and_ray_pools_follow():
    replicas = _replicas(2, 4, hosts=("n1", "n2"), pp=2)
    result, errors = _plan({"n1": NVSWITCH, "n2": NVSWITCH}, replicas)
    assert errors == []
    assert [replica["gpus"] for replica in result["replicas"]] == [
        {"n1": [0, 1, 2, 3], "n2": [0, 1, 2, 3]}, {"n1": [4, 5, 6, 7], "n2": [4, 5, 6, 7]}]
    assert [replica["backend"] for replica in result["replicas"]] == ["ray", "ray"]
    assert result["hosts"]["n2"] == {"gpus": list(range(8)), "ray_gpus": list(range(8))}


def test_ray_pool_holds_only_the_ray_replicas_gpus():
    replicas = _replicas(1, 4, hosts=("n1", "n2"), pp=2) + [dict(_replicas(1, 4)[0], name="local")]
    result, errors = _plan({"n1": NVSWITCH, "n2": NVSWITCH}, replicas)
    assert errors == []
    assert result["hosts"]["n1"] == {"gpus": list(range(8)), "ray_gpus": [0, 1, 2, 3]}
    assert result["replicas"][1]["gpus"] == {"n1": [4, 5, 6, 7]} and result["replicas"][1]["backend"] == "mp"


def test_pp_inside_one_host_takes_one_island_per_stage():
    result, errors = _plan({"n1": PAIRS}, _replicas(1, 2, pp=2))
    assert errors == []
    assert _gpus(result) == [[0, 1, 2, 3]]


def test_recommendation_gets_gpus_and_distinct_ports():
    result, errors = _plan({"n1": NVSWITCH}, [])
    assert errors == []
    assert result["recommendation"]["tp"] == 1
    assert _gpus(result) == [[i] for i in range(8)]
    assert [replica["port"] for replica in result["replicas"]] == list(range(8000, 8008))


def test_ports_skip_explicit_and_reserved_ones():
    replicas = [{"name": "a", "hosts": ["n1"]}, {"name": "b", "hosts": ["n1"], "port": 8001}, {"name": "c", "hosts": ["n1"]}]
    ports, errors = assign_ports(replicas, {"n1": {"8000": "HAProxy (loadbalancer_port)"}})
    assert (ports, errors) == ({"a": 8002, "b": 8001, "c": 8003}, [])


def test_a_reserved_port_that_is_not_a_number_is_an_error_naming_its_holder():
    # loadbalancer_port from a load balancer's own host_vars reaches the plan before that host's checks run.
    ports, errors = assign_ports([{"name": "a", "hosts": ["n1"]}], {"lb0": {"eighty": "HAProxy (loadbalancer_port)"}})
    assert ports == {"a": 8000}
    assert errors == ["HAProxy (loadbalancer_port) on lb0 must be a port number 1-65535, got 'eighty'"]


def test_assignment_without_topology_packs_in_index_order():
    nodes = {"n1": {"name": "n1", "gpu_count": 4}}
    assignment, errors = assign_gpus(_replicas(2, 2), nodes)
    assert (assignment, errors) == ({"r0": {"n1": [0, 1]}, "r1": {"n1": [2, 3]}}, [])


def test_unit_gpus_names_gpus_by_uuid_where_the_facts_know_them():
    facts = [{"index": i, "uuid": "GPU-%d%s" % (i, "a" * 7)} for i in range(4)]
    assert unit_gpus([2, 3], facts) == {
        "visible_devices": "GPU-2aaaaaaa,GPU-3aaaaaaa",
        "devices": ["/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                    "/dev/nvidia-modeset"]}
    assert unit_gpus([1])["visible_devices"] == "1"
    with pytest.raises(ValueError, match=r"GPU\(s\) \[7\] are not among the host's GPUs \[0, 1, 2, 3\]"):
        unit_gpus([7], facts)


def test_a_uuid_that_is_not_one_never_reaches_the_unit():
    facts = [{"index": 0, "uuid": "GPU-1 ExecStartPre=/bin/sh"}, {"index": 1, "uuid": "GPU-2aaaaaaa"}]
    assert unit_gpus([0, 1], facts)["visible_devices"] == "0,1"
