"""Planner arithmetic against hand-computed cases, and the guide's starting table."""

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._planner import (
    GIB,
    PlanError,
    executor_backend,
    estimate_params,
    kv_bytes_per_token,
    max_concurrency,
    memory_budget,
    model_shape_from_config,
    normalize_shape,
    plan_parallelism,
    validate_parallelism,
    weight_bytes,
)

MIB = 1024 * 1024
# Published config.json values.
LLAMA3_8B = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=False,
                 torch_dtype="bfloat16")
LLAMA3_70B = dict(num_hidden_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, torch_dtype="bfloat16")
QWEN25_32B = dict(num_hidden_layers=64, hidden_size=5120, intermediate_size=27648, num_attention_heads=40,
                  num_key_value_heads=8, vocab_size=152064, max_position_embeddings=32768, torch_dtype="bfloat16")
LLAMA31_405B = dict(num_hidden_layers=126, hidden_size=16384, intermediate_size=53248, num_attention_heads=128,
                    num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, torch_dtype="bfloat16")
H100 = 81559 * MIB   # what nvidia-smi reports for an H100 80GB HBM3
H200 = 143771 * MIB  # the real H200 capture in tests/fixtures
A100_40 = 40960 * MIB


def _node(name, memory, count=8, sku=None, islands="all"):
    node = {"name": name, "gpu_count": count, "gpu_memory_bytes": memory, "gpu_name": sku or str(memory)}
    if islands == "all":
        node["islands"] = [list(range(count))]
    elif islands is not None:
        node["islands"] = islands
    return node


WORKLOAD = {"max_model_len": 8192, "concurrency": 32}


def test_params_estimate_matches_published_counts():
    # Llama 3 8B: emb 128256*4096 = 525,336,576; per layer q,o 2*4096*4096 + k,v 2*4096*1024 = 41,943,040,
    # MLP 3*4096*14336 = 176,160,768, norms 8192 -> 218,112,000 * 32 = 6,979,584,000; + final norm 4096 + lm_head.
    assert estimate_params(model_shape_from_config(LLAMA3_8B)) == 525336576 * 2 + 218112000 * 32 + 4096 == 8030261248
    assert abs(model_shape_from_config(LLAMA3_70B)["params"] / 70.6e9 - 1) < 0.01
    assert abs(model_shape_from_config(LLAMA31_405B)["params"] / 405.9e9 - 1) < 0.01


def test_shape_from_config():
    shape = model_shape_from_config(LLAMA3_8B)
    assert {k: shape[k] for k in ("layers", "heads", "kv_heads", "head_dim", "max_model_len", "dtype", "quantization")} == \
        {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "max_model_len": 131072, "dtype": "bfloat16",
         "quantization": None}


def test_nested_text_config_and_quantization():
    config = {"architectures": ["LlavaForConditionalGeneration"], "text_config": dict(LLAMA3_8B),
              "quantization_config": {"quant_method": "awq", "bits": 4}}
    shape = model_shape_from_config(config)
    assert shape["layers"] == 32 and shape["quantization"] == "int4"
    # Linear layers at 4 bits; the embedding and the untied lm_head (2 x 128256 x 4096) stay BF16.
    embeddings = 2 * 128256 * 4096
    assert weight_bytes(shape) == (8030261248 - embeddings) // 2 + embeddings * 2 == 5591140352
    fp8 = model_shape_from_config(dict(LLAMA3_8B, quantization_config={"quant_method": "fp8"}))
    assert weight_bytes(fp8) == (8030261248 - embeddings) + embeddings * 2 == 9080934400


@pytest.mark.parametrize("config, message", [
    ({k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"}, "lacks num_hidden_layers or n_layer or num_layers"),
    (dict(LLAMA3_8B, hidden_size=0), "hidden_size must be a positive integer, got 0"),
    (dict(LLAMA3_8B, torch_dtype="float64"), "unknown dtype 'float64'"),
    ("not a dict", "must be a dict"),
])
def test_bad_config_names_the_key(config, message):
    with pytest.raises(PlanError, match=message):
        model_shape_from_config(config)


def test_explicit_shape_needs_params_or_sizes():
    with pytest.raises(PlanError, match="needs params, or vocab_size and intermediate_size"):
        normalize_shape({"layers": 2, "hidden_size": 64, "heads": 4})
    assert normalize_shape({"layers": 2, "hidden_size": 64, "heads": 4, "params": 1000})["head_dim"] == 16


def test_kv_bytes_per_token_by_hand():
    shape = model_shape_from_config(LLAMA3_8B)
    assert kv_bytes_per_token(shape) == 2 * 32 * 8 * 128 * 2 == 131072
    assert kv_bytes_per_token(shape, tp=2) == 2 * 32 * 4 * 128 * 2
    # 8 KV heads on 16 ranks: vLLM replicates, one head per rank, not half a head.
    assert kv_bytes_per_token(shape, tp=16) == 2 * 32 * 1 * 128 * 2
    assert kv_bytes_per_token(shape, pp=3) == 2 * 11 * 8 * 128 * 2
    assert kv_bytes_per_token(shape, "fp8") == 65536


def test_memory_budget_by_hand():
    shape = model_shape_from_config(LLAMA3_8B)
    budget = memory_budget(shape, H100, 1, 1, WORKLOAD)
    capacity = int(H100 * 0.9)
    assert budget["weights"] == 8030261248 * 2
    assert budget["kv_tokens"] == 8192 * 32
    assert budget["kv_cache"] == 8192 * 32 * 131072 == 32 * GIB
    assert budget["runtime_overhead"] == int(1.5 * GIB + 0.02 * H100)
    assert budget["operational_margin"] == int(0.10 * capacity)
    assert budget["capacity"] == capacity
    assert budget["total"] == budget["weights"] + budget["kv_cache"] + budget["runtime_overhead"] + budget["operational_margin"]
    assert budget["headroom"] == capacity - budget["total"]
    assert budget["fits"] is True
    assert list(budget)[:4] == ["weights", "kv_cache", "runtime_overhead", "operational_margin"]
    assert budget["gib"]["kv_cache"] == 32.0
    # Prompt + output lengths override max_model_len for the KV budget.
    short = memory_budget(shape, H100, 1, 1, dict(WORKLOAD, prompt_tokens=1000, output_tokens=24))
    assert short["kv_cache"] == 1024 * 32 * 131072
    # Comm buffers only once ranks talk.
    assert memory_budget(shape, H100, 2, 1, WORKLOAD)["runtime_overhead"] == budget["runtime_overhead"] + GIB // 2


def test_fp8_kv_cache_doubles_concurrency():
    shape = model_shape_from_config(LLAMA3_70B)
    bf16 = max_concurrency(shape, H100, 4, 1, 8192)
    fp8 = max_concurrency(shape, H100, 4, 1, 8192, "fp8")
    assert bf16 == 44
    assert fp8 in (2 * bf16, 2 * bf16 + 1)


@pytest.mark.parametrize("label, config, nodes, workload, tp, pp", [
    ("7-8B -> tp1", LLAMA3_8B, [_node("a", H100)], WORKLOAD, 1, 1),
    ("32B moderate concurrency -> tp2", QWEN25_32B, [_node("a", H100)], dict(WORKLOAD, concurrency=24), 2, 1),
    ("32B high concurrency -> tp4", QWEN25_32B, [_node("a", H100)], dict(WORKLOAD, concurrency=64), 4, 1),
    ("70B BF16 on 80 GB -> tp4", LLAMA3_70B, [_node("a", H100)], WORKLOAD, 4, 1),
    ("70B BF16 high concurrency on 80 GB -> tp8", LLAMA3_70B, [_node("a", H100)], dict(WORKLOAD, concurrency=64), 8, 1),
    ("70B BF16 high concurrency on 141 GB -> tp4", LLAMA3_70B, [_node("a", H200)], dict(WORKLOAD, concurrency=64), 4, 1),
    ("405B dense on two 8x80 GB nodes -> tp8 pp2", LLAMA31_405B, [_node("a", H100), _node("b", H100)], WORKLOAD, 8, 2),
    ("70B on two 4x40 GB nodes -> tp4 pp2", LLAMA3_70B, [_node("a", A100_40, 4), _node("b", A100_40, 4)],
     dict(WORKLOAD, concurrency=16), 4, 2),
])
def test_guide_starting_table(label, config, nodes, workload, tp, pp):
    plan = plan_parallelism(model_shape_from_config(config), nodes, workload)
    assert (plan["tp"], plan["pp"]) == (tp, pp), label
    assert plan["workers_per_replica"] == tp * pp
    assert plan["backend"] == ("ray" if pp > 1 else "mp")
    assert plan["budget"]["fits"] and plan["budget"]["headroom"] >= 0
    assert plan["max_concurrency"] >= workload["concurrency"]


def test_placement_packs_replicas_inside_islands():
    plan = plan_parallelism(model_shape_from_config(LLAMA3_70B), [_node("a", H100)], WORKLOAD)
    assert plan["replicas"] == 2
    assert plan["placement"] == [[{"node": "a", "gpus": [0, 1, 2, 3]}], [{"node": "a", "gpus": [4, 5, 6, 7]}]]
    two_islands = _node("b", H100, islands=[[0, 1, 2, 3], [4, 5, 6, 7]])
    # TP=8 would fit in memory but not inside one island, and TP=4 leaves too little KV: refused, never TP across islands.
    with pytest.raises(PlanError, match="the closest, tp=4 pp=1"):
        plan_parallelism(model_shape_from_config(LLAMA3_70B), [two_islands], dict(WORKLOAD, concurrency=64))


def test_pp_only_when_no_node_holds_a_replica():
    plan = plan_parallelism(model_shape_from_config(LLAMA3_8B), [_node("a", H100), _node("b", H100)], WORKLOAD)
    assert (plan["tp"], plan["pp"], plan["replicas"]) == (1, 1, 16)
    big = plan_parallelism(model_shape_from_config(LLAMA31_405B), [_node(n, H100) for n in "abcd"], WORKLOAD)
    assert big["placement"] == [[{"node": "a", "gpus": list(range(8))}, {"node": "b", "gpus": list(range(8))}],
                                [{"node": "c", "gpus": list(range(8))}, {"node": "d", "gpus": list(range(8))}]]
    assert [reason.split(":")[0] for reason in big["reasons"]] == [
        "tp=1 pp=1", "tp=2 pp=1", "tp=4 pp=1", "tp=8 pp=1", "tp=16 pp=1", "tp=1 pp=2", "tp=2 pp=2", "tp=4 pp=2"]


def test_tp_over_pcie_warns():
    pcie = _node("p", H100, 2, islands=[[0], [1]])
    plan = plan_parallelism(model_shape_from_config(QWEN25_32B), [pcie], dict(WORKLOAD, concurrency=24))
    assert plan["tp"] == 2
    assert plan["warnings"] == ["node p: TP=2 crosses PCIe (no NVLink); every token pays PCIe all-reduces"]
    with pytest.raises(PlanError):
        plan_parallelism(model_shape_from_config(QWEN25_32B), [pcie], dict(WORKLOAD, concurrency=24),
                         {"allow_tp_over_pcie": False})


def test_refusal_gives_numbers_and_fix():
    with pytest.raises(PlanError) as caught:
        plan_parallelism(model_shape_from_config(LLAMA31_405B), [_node("a", H100)], WORKLOAD)
    message = str(caught.value)
    assert message.startswith("model does not fit: 756.0 GiB of weights on 1 node(s) of 79.7 GiB GPUs; the closest, "
                              "tp=8 pp=1, needs")
    assert "Fix: more or larger GPUs, quantization, an fp8 KV cache" in message
    assert caught.value.details["best_tp"] == 8 and caught.value.details["weights_gib"] == 755.96


def test_mixed_skus_refused():
    with pytest.raises(PlanError, match="mixed GPU SKUs across the nodes"):
        plan_parallelism(model_shape_from_config(LLAMA3_8B), [_node("a", H100, sku="H100"), _node("b", H200, sku="H200")],
                         WORKLOAD)


def test_unknown_option_refused():
    with pytest.raises(PlanError, match="unknown planner option"):
        plan_parallelism(model_shape_from_config(LLAMA3_8B), [_node("a", H100)], WORKLOAD, {"gpu_util": 0.9})


def test_validate_ok_reports_budget():
    result = validate_parallelism(model_shape_from_config(LLAMA3_70B), [_node("a", H100)], 4, 1, WORKLOAD)
    assert result["ok"] and result["errors"] == []
    assert result["max_concurrency"] == 44
    assert result["budget"]["fits"]


@pytest.mark.parametrize("nodes, tp, pp, expected", [
    ([_node("a", H100, 4)], 8, 1, "tp*pp=8 GPU workers but the replica's hosts have 4 GPUs"),
    ([_node("a", H100, 4), _node("b", H100, 4)], 8, 2,
     "vllm_cluster_replicas.tensor_parallel_size=8 is larger than the 4 GPUs of one node: a TP group never crosses nodes"),
    ([_node("a", H100, 8, islands=[[0, 1, 2, 3], [4, 5, 6, 7]])], 8, 1,
     "node a: TP=8 does not fit inside one NVLink island (largest has 4 GPUs)"),
    ([_node("a", H100), _node("b", H100)], 8, 3, "vllm_cluster_replicas.pipeline_parallel_size=3 but the replica spans 2 node(s)"),
    ([_node("a", H100), _node("b", H100)], 8, 1, "a replica spans nodes only through PP stages"),
    ([_node("a", H100)], 3, 1, "tensor_parallel_size=3 does not divide the model's 64 attention heads"),
    ([_node("a", H100, sku="H100"), _node("b", H200, sku="H200")], 8, 2, "mixed GPU SKUs in one replica"),
    ([dict(_node("a", H100), mig_enabled=True)], 4, 1, "node a has MIG enabled"),
    ([_node("a", H100)], 2, 1, "tp=2 pp=1 needs"),
    ([_node("a", H100)], 0, 1, "tensor_parallel_size must be a positive integer, got 0"),
])
def test_validate_errors_name_the_variable(nodes, tp, pp, expected):
    result = validate_parallelism(model_shape_from_config(LLAMA3_70B), nodes, tp, pp, WORKLOAD)
    assert not result["ok"]
    assert any(expected in error for error in result["errors"]), result["errors"]


def test_validate_pp_beyond_layers():
    tiny = normalize_shape({"layers": 2, "hidden_size": 64, "heads": 4, "params": 1000})
    nodes = [_node(n, H100) for n in "abc"]
    result = validate_parallelism(tiny, nodes, 1, 3, WORKLOAD)
    assert "pipeline_parallel_size=3 exceeds the model's 2 layers" in result["errors"][0]


def test_multinode_backend_option_picks_the_executor_of_spanning_replicas():
    nodes = [_node("a", A100_40, 4), _node("b", A100_40, 4)]
    plan = plan_parallelism(model_shape_from_config(LLAMA3_70B), nodes, dict(WORKLOAD, concurrency=16),
                            {"multinode_backend": "mp"})
    assert (plan["pp"], plan["backend"]) == (2, "mp")
    assert executor_backend(1, {"multinode_backend": "ray"}) == "mp"
    assert executor_backend(2) == "ray"
    with pytest.raises(PlanError, match="vllm_cluster_multinode_backend"):
        executor_backend(2, {"multinode_backend": "slurm"})
