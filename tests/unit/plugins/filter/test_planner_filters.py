"""Planner filters: same numbers as the module_utils, AnsibleFilterError on bad input."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.vllm_cluster.plugins.filter.planner import FilterModule

FILTERS = FilterModule().filters()
CONFIG = dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
              num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, torch_dtype="bfloat16")
NODE = {"name": "a", "gpu_count": 8, "gpu_memory_bytes": 81559 * 1024 * 1024, "gpu_name": "H100", "islands": [list(range(8))]}
WORKLOAD = {"max_model_len": 8192, "concurrency": 32}


def test_filter_names():
    assert sorted(FILTERS) == ["vllm_kv_bytes_per_token", "vllm_memory_budget", "vllm_model_shape", "vllm_plan_parallelism"]


def test_shape_and_kv_from_config_or_shape():
    shape = FILTERS["vllm_model_shape"](CONFIG)
    assert shape["params"] == 8030261248
    assert FILTERS["vllm_model_shape"](CONFIG, params=8000000000)["params"] == 8000000000
    assert FILTERS["vllm_kv_bytes_per_token"](CONFIG) == 131072
    assert FILTERS["vllm_kv_bytes_per_token"](shape, "fp8", 2) == 32768


def test_budget_and_plan():
    budget = FILTERS["vllm_memory_budget"](CONFIG, NODE["gpu_memory_bytes"], WORKLOAD)
    assert budget["kv_cache"] == 32 * 1024 ** 3 and budget["fits"]
    plan = FILTERS["vllm_plan_parallelism"](CONFIG, [NODE], WORKLOAD)
    assert (plan["tp"], plan["pp"], plan["backend"], plan["replicas"]) == (1, 1, "mp", 8)


@pytest.mark.parametrize("name, args, message", [
    ("vllm_model_shape", ({"hidden_size": 1},), "vllm_model_shape: model config.json lacks num_hidden_layers"),
    ("vllm_kv_bytes_per_token", (CONFIG, "int3"), "unknown cache dtype 'int3'"),
    ("vllm_plan_parallelism", (CONFIG, [], WORKLOAD), "no GPU nodes to plan for"),
    ("vllm_memory_budget", (CONFIG, 1, WORKLOAD, 1, 1, {"bogus": 1}), "unknown planner option"),
])
def test_errors_are_filter_errors(name, args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS[name](*args)
