"""vLLM's own memory figures from its log, beside the planner's for the same shape, GPU and settings.

  python3 vllm_memory.py CONFIG_JSON LOG GPU_MEMORY_MIB GPU_MEMORY_UTILIZATION MAX_MODEL_LEN   prints JSON

Used on the GPU device right after a replica started, and by tests/unit/test_device_vllm_memory.py, which
replays the captured lines (tests/fixtures/gpu/h200-1gpu-device/vllm/) so CI keeps the agreement.
"""

import json
import re
import sys

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._planner import (
    GIB,
    kv_bytes_per_token,
    kv_cache_tokens,
    model_shape_from_config,
    weight_bytes,
)

_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
PATTERNS = {
    "kv_cache_tokens": re.compile(r"GPU KV cache size: " + _NUMBER + r" tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for " + _NUMBER + r" tokens per request: " + _NUMBER + r"x"),
    "weights_gib": re.compile(r"Model loading took " + _NUMBER + r" GiB"),
    "available_kv_gib": re.compile(r"Available KV cache memory: " + _NUMBER + r" GiB"),
}


def _num(text):
    return float(text.replace(",", ""))


def parse_log(text):
    """The last value of each figure vLLM logged (a restarted engine logs them again)."""
    found = {}
    for line in text.splitlines():
        for key, pattern in PATTERNS.items():
            match = pattern.search(line)
            if match:
                found[key] = _num(match.group(match.lastindex))
                if key == "max_concurrency":
                    found["max_concurrency_tokens"] = _num(match.group(1))
    return found


def compare(config, log_text, gpu_memory_mib, utilization, max_model_len):
    shape = model_shape_from_config(config)
    memory = int(gpu_memory_mib) * 1024 * 1024
    options = {"gpu_memory_utilization": utilization}
    vllm = parse_log(log_text)
    planner_tokens = kv_cache_tokens(shape, memory, 1, 1, options=options)
    out = {"vllm": vllm, "planner": {
        "weights_gib": round(weight_bytes(shape) / float(GIB), 2),
        "kv_bytes_per_token": kv_bytes_per_token(shape),
        "kv_cache_tokens": planner_tokens,
        "max_concurrency": round(planner_tokens / float(max_model_len), 2)}}
    capacity_gib = memory * utilization / float(GIB)
    out["planner"]["runtime_overhead_gib"] = round(capacity_gib - out["planner"]["weights_gib"]
                                                   - planner_tokens * out["planner"]["kv_bytes_per_token"] / float(GIB), 2)
    if "weights_gib" in vllm and "available_kv_gib" in vllm:
        # What vLLM spent beside weights and KV inside its budget: activation peak, non-torch memory (CUDA graphs
        # where its profiler counts them): the term the planner's runtime overhead stands for.
        out["vllm"]["runtime_overhead_gib"] = round(capacity_gib - vllm["weights_gib"] - vllm["available_kv_gib"], 2)
    if "kv_cache_tokens" in vllm:
        out["kv_tokens_ratio"] = round(planner_tokens / vllm["kv_cache_tokens"], 4)
    if "max_concurrency" in vllm:
        out["max_concurrency_ratio"] = round(out["planner"]["max_concurrency"] / vllm["max_concurrency"], 4)
    return out


def main(argv):
    with open(argv[0]) as handle:
        config = json.load(handle)
    with open(argv[1], errors="replace") as handle:
        text = handle.read()
    print(json.dumps(compare(config, text, int(argv[2]), float(argv[3]), int(argv[4])), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
