# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU memory budget and TP/PP planning for vLLM replicas.

Pure functions. Memory is budgeted per GPU in the guide's order: weights (after dtype or
quantization), KV cache ((prompt + output) x concurrency x cache dtype), runtime overhead
(CUDA graphs, allocator, NCCL buffers), operational margin. TP stays inside one NVLink island
of one node; PP crosses nodes, and only when no single node can hold a replica.
"""

from __future__ import annotations

GIB = 1024 ** 3

DTYPE_BYTES = {
    "float32": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "float8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
    "int4": 0.5, "awq": 0.5, "gptq": 0.5,
}

# Defaults, per GPU. vLLM's profiler measures the real figures at start; these are the
# planning estimates: CUDA context + CUDA graphs + activation/sampler peak is about 1.5 GiB
# on Hopper-class GPUs in eager-or-graph mode, NCCL/custom all-reduce buffers add about
# 0.5 GiB once ranks talk, and allocator fragmentation grows with the card (2 %).
DEFAULT_OPTIONS = {
    "gpu_memory_utilization": 0.90,
    "overhead_bytes": int(1.5 * GIB),
    "comm_overhead_bytes": int(0.5 * GIB),
    "overhead_fraction": 0.02,
    "margin_fraction": 0.10,
    "tp_candidates": (1, 2, 4, 8, 16),
    "max_pp": 8,
    "allow_tp_over_pcie": True,
    # Executor of a replica that spans nodes: Ray on GPU clusters; vLLM's multi-node mp mode where Ray
    # is unavailable (the CPU build refuses it).
    "multinode_backend": "ray",
}


class PlanError(ValueError):
    """Nothing fits, or the input is wrong; ``details`` carries the numbers."""

    def __init__(self, message, details=None):
        super().__init__(message)
        self.details = details or {}


def _options(options):
    merged = dict(DEFAULT_OPTIONS)
    unknown = sorted(set(options or {}) - set(DEFAULT_OPTIONS))
    if unknown:
        raise PlanError("unknown planner option(s) %s; known: %s" % (", ".join(unknown), ", ".join(sorted(DEFAULT_OPTIONS))))
    merged.update(options or {})
    utilization = merged["gpu_memory_utilization"]
    if not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
        raise PlanError("planner option gpu_memory_utilization must be in (0, 1], got %r" % (utilization,))
    if merged["multinode_backend"] not in ("ray", "mp"):
        raise PlanError("planner option multinode_backend must be ray or mp, got %r (set vllm_cluster_multinode_backend)"
                        % (merged["multinode_backend"],))
    return merged


def executor_backend(node_count, options=None):
    """mp inside one node; the configured multi-node backend (Ray by default) when a replica spans nodes."""
    return _options(options)["multinode_backend"] if node_count > 1 else "mp"


def _gib(value):
    return round(value / float(GIB), 2)


def dtype_bytes(name, what="dtype"):
    """Bytes per element for a dtype or quantization name."""
    key = str(name).lower().replace("torch.", "")
    if key not in DTYPE_BYTES:
        raise PlanError("unknown %s %r; known: %s" % (what, name, ", ".join(sorted(DTYPE_BYTES))))
    return DTYPE_BYTES[key]


def _int_field(source, keys, label, required=True):
    for key in keys:
        value = source.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanError("%s: %s must be a positive integer, got %r" % (label, key, value))
            return value
    if required:
        raise PlanError("%s lacks %s" % (label, " or ".join(keys)))
    return None


def estimate_params(shape):
    """Parameter count of a decoder-only transformer with GQA attention and a gated MLP.

    Embeddings + per layer (q, k, v, o projections, 3 MLP matrices, 2 norms) + final norm
    + lm_head unless tied. Within 1 % of the published Llama 3 counts.
    """
    hidden, heads, kv_heads, head_dim = shape["hidden_size"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * shape["intermediate_size"]
    embeddings = shape["vocab_size"] * hidden
    lm_head = 0 if shape["tie_word_embeddings"] else embeddings
    return embeddings + shape["layers"] * (attention + mlp + 2 * hidden) + hidden + lm_head


def normalize_shape(shape):
    """Validate an explicit shape dict and fill in head_dim, kv_heads and params."""
    label = "model shape"
    out = {
        "layers": _int_field(shape, ("layers",), label),
        "hidden_size": _int_field(shape, ("hidden_size",), label),
        "heads": _int_field(shape, ("heads",), label),
        "vocab_size": _int_field(shape, ("vocab_size",), label, required=False),
        "intermediate_size": _int_field(shape, ("intermediate_size",), label, required=False),
        "max_model_len": _int_field(shape, ("max_model_len",), label, required=False),
        "dtype": str(shape.get("dtype") or "bfloat16"),
        "quantization": shape.get("quantization"),
        "tie_word_embeddings": bool(shape.get("tie_word_embeddings", False)),
    }
    out["kv_heads"] = _int_field(shape, ("kv_heads",), label, required=False) or out["heads"]
    out["head_dim"] = _int_field(shape, ("head_dim",), label, required=False) or out["hidden_size"] // out["heads"]
    dtype_bytes(out["dtype"])
    if out["quantization"]:
        dtype_bytes(out["quantization"], "quantization")
    params = _int_field(shape, ("params",), label, required=False)
    if params is None:
        if not (out["vocab_size"] and out["intermediate_size"]):
            raise PlanError("model shape needs params, or vocab_size and intermediate_size to estimate it")
        params = estimate_params(out)
    out["params"] = params
    return out


def model_shape_from_config(config, params=None):
    """Normalised shape from a Hugging Face ``config.json`` dict (``text_config`` of multimodal models too)."""
    if not isinstance(config, dict):
        raise PlanError("model config must be a dict (the model's config.json), got %s" % type(config).__name__)
    text = config.get("text_config") or config
    label = "model config.json"
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    quantization = None
    if quant:
        method = str(quant.get("quant_method", "")).lower()
        bits = quant.get("bits") or quant.get("w_bit")
        quantization = {4: "int4", 8: "int8"}.get(bits, method or None)
        if method == "fp8":
            quantization = "fp8"
    shape = {
        "layers": _int_field(text, ("num_hidden_layers", "n_layer", "num_layers"), label),
        "hidden_size": _int_field(text, ("hidden_size", "n_embd", "d_model"), label),
        "heads": _int_field(text, ("num_attention_heads", "n_head"), label),
        "kv_heads": _int_field(text, ("num_key_value_heads",), label, required=False),
        "head_dim": _int_field(text, ("head_dim",), label, required=False),
        "intermediate_size": _int_field(text, ("intermediate_size", "ffn_dim"), label),
        "vocab_size": _int_field(text, ("vocab_size",), label),
        "max_model_len": _int_field(text, ("max_position_embeddings", "max_seq_len"), label, required=False),
        "dtype": text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16",
        "quantization": quantization,
        "tie_word_embeddings": text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)),
        "params": params,
    }
    return normalize_shape(dict((key, value) for key, value in shape.items() if value is not None))


def embedding_params(shape):
    """Input embedding plus an untied lm_head (0 when the vocabulary is unknown)."""
    if not shape.get("vocab_size"):
        return 0
    return shape["vocab_size"] * shape["hidden_size"] * (1 if shape["tie_word_embeddings"] else 2)


def weight_bytes(shape):
    """Bytes of all weights after dtype or quantization.

    Quantization (FP8, INT8, AWQ/GPTQ) covers the linear layers; the embedding and lm_head stay in the model's
    dtype, as vLLM and the quantized checkpoints keep them (2.1 GB of a 70B FP8 Llama).
    """
    if not shape["quantization"]:
        return int(shape["params"] * dtype_bytes(shape["dtype"]))
    embeddings = min(embedding_params(shape), shape["params"])
    return int((shape["params"] - embeddings) * dtype_bytes(shape["quantization"]) + embeddings * dtype_bytes(shape["dtype"]))


def _ceil_div(a, b):
    return -(-a // b)


def kv_bytes_per_token(shape, cache_dtype="auto", tp=1, pp=1):
    """KV-cache bytes one token occupies on one GPU.

    K and V x layers on this PP stage x KV heads on this TP rank x head_dim x cache dtype.
    With fewer KV heads than TP ranks vLLM replicates them, so a rank never holds less than one.
    """
    cache = shape["dtype"] if cache_dtype in (None, "auto") else cache_dtype
    heads_per_rank = max(1, _ceil_div(shape["kv_heads"], tp))
    return int(2 * _ceil_div(shape["layers"], pp) * heads_per_rank * shape["head_dim"] * dtype_bytes(cache, "cache dtype"))


def _tokens_per_sequence(workload):
    prompt, output = workload.get("prompt_tokens"), workload.get("output_tokens")
    if prompt or output:
        return int(prompt or 0) + int(output or 0)
    return int(workload["max_model_len"])


def _fixed_per_gpu(shape, gpu_memory_bytes, tp, pp, opts):
    """(weights, runtime overhead, margin, capacity) per GPU: everything but the KV cache."""
    capacity = int(gpu_memory_bytes * opts["gpu_memory_utilization"])
    weights = _ceil_div(weight_bytes(shape), tp * pp)
    overhead = int(opts["overhead_bytes"] + opts["overhead_fraction"] * gpu_memory_bytes)
    if tp * pp > 1:
        overhead += int(opts["comm_overhead_bytes"])
    margin = int(opts["margin_fraction"] * capacity)
    return weights, overhead, margin, capacity


def memory_budget(shape, gpu_memory_bytes, tp, pp, workload, cache_dtype=None, options=None):
    """Per-GPU budget in the guide's order, with ``fits`` and ``headroom`` (capacity minus everything)."""
    opts = _options(options)
    cache = cache_dtype or workload.get("cache_dtype") or "auto"
    weights, overhead, margin, capacity = _fixed_per_gpu(shape, gpu_memory_bytes, tp, pp, opts)
    kv_tokens = _tokens_per_sequence(workload) * int(workload["concurrency"])
    kv_cache = kv_tokens * kv_bytes_per_token(shape, cache, tp, pp)
    total = weights + kv_cache + overhead + margin
    budget = {
        "weights": weights,
        "kv_cache": kv_cache,
        "runtime_overhead": overhead,
        "operational_margin": margin,
        "total": total,
        "capacity": capacity,
        "headroom": capacity - total,
        "fits": total <= capacity,
        "kv_tokens": kv_tokens,
    }
    budget["gib"] = dict((key, _gib(value)) for key, value in budget.items() if key not in ("fits", "kv_tokens"))
    return budget


def max_concurrency(shape, gpu_memory_bytes, tp, pp, tokens_per_seq, cache_dtype="auto", options=None):
    """Most sequences of tokens_per_seq whose KV fits beside weights, overhead and margin (0 if none)."""
    opts = _options(options)
    weights, overhead, margin, capacity = _fixed_per_gpu(shape, gpu_memory_bytes, tp, pp, opts)
    free = capacity - weights - overhead - margin
    per_sequence = tokens_per_seq * kv_bytes_per_token(shape, cache_dtype, tp, pp)
    return max(0, free // per_sequence)


def kv_cache_tokens(shape, gpu_memory_bytes, tp, pp, cache_dtype="auto", options=None):
    """KV-cache tokens vLLM allocates per GPU at gpu_memory_utilization: capacity less weights and runtime overhead.

    What vLLM logs as "GPU KV cache size"; the planner's operational margin is not taken out, since vLLM hands
    that memory to its KV cache too (the plan keeps it as headroom by asking for less concurrency).
    """
    opts = _options(options)
    weights, overhead, _margin, capacity = _fixed_per_gpu(shape, gpu_memory_bytes, tp, pp, opts)
    return max(0, (capacity - weights - overhead) // kv_bytes_per_token(shape, cache_dtype, tp, pp))


def _node_memory(node):
    if node.get("gpu_memory_bytes"):
        return int(node["gpu_memory_bytes"])
    if node.get("gpu_memory_gib"):
        return int(node["gpu_memory_gib"] * GIB)
    raise PlanError("node %s lacks gpu_memory_bytes" % node.get("name"))


def _sku_error(nodes):
    kinds = sorted(set((node.get("gpu_name"), _node_memory(node)) for node in nodes), key=str)
    if len(kinds) <= 1:
        return None
    return "mixed GPU SKUs in one replica (%s): every rank must be the same GPU, or the slowest and smallest sets the pace; " \
        "group replicas by SKU" % ", ".join("%s=%s/%.1f GiB" % (n["name"], n.get("gpu_name"), _gib(_node_memory(n))) for n in nodes)


def _has_nvlink(node):
    return any(len(island) > 1 for island in node.get("islands") or [])


def _tp_placement(node, tp, opts, warnings):
    """Disjoint GPU groups of size tp on one node, inside NVLink islands where islands are known."""
    count = node["gpu_count"]
    if tp > count:
        return []
    islands = node.get("islands")
    if islands and _has_nvlink(node):
        used, groups = set(), []
        for island in sorted(islands, key=lambda isl: (-len(isl), isl)):
            free = [gpu for gpu in island if gpu not in used]
            while len(free) >= tp:
                groups.append(free[:tp])
                used.update(free[:tp])
                free = free[tp:]
        return groups
    if tp > 1:
        if islands and not opts["allow_tp_over_pcie"]:
            return []
        warnings.add("node %s: TP=%d %s; every token pays PCIe all-reduces" % (
            node["name"], tp, "crosses PCIe (no NVLink)" if islands else "placement inside an NVLink island is unverified (no topology)"))
    return [list(range(start, start + tp)) for start in range(0, count - tp + 1, tp)]


def plan_parallelism(shape, nodes, workload, options=None):
    """Recommend tp/pp and placement: smallest pp, then smallest tp, whose budget fits."""
    opts = _options(options)
    if not nodes:
        raise PlanError("no GPU nodes to plan for")
    error = _sku_error(nodes)
    if error:
        raise PlanError(error.replace("in one replica", "across the nodes"))
    memory = _node_memory(nodes[0])
    reasons, warnings = [], set()
    candidates = [tp for tp in opts["tp_candidates"] if shape["heads"] % tp == 0]
    best_need = None
    for pp in range(1, min(len(nodes), opts["max_pp"], shape["layers"]) + 1):
        for tp in candidates:
            tried = set()
            placements = [_tp_placement(node, tp, opts, tried) for node in nodes]
            if pp == 1 and not any(placements):
                reasons.append("tp=%d pp=1: no node offers %d GPUs inside one NVLink island" % (tp, tp))
                continue
            if pp > 1 and sum(1 for groups in placements if groups) < pp:
                reasons.append("tp=%d pp=%d: fewer than %d nodes offer %d GPUs inside one island" % (tp, pp, pp, tp))
                continue
            budget = memory_budget(shape, memory, tp, pp, workload, options=opts)
            need = budget["total"]
            if best_need is None or need < best_need[0]:
                best_need = (need, tp, pp, budget)
            if not budget["fits"]:
                reasons.append("tp=%d pp=%d: needs %.1f GiB per GPU (weights %.1f + KV %.1f + overhead %.1f + margin %.1f), "
                               "capacity %.1f GiB" % ((tp, pp) + tuple(budget["gib"][k] for k in (
                                   "total", "weights", "kv_cache", "runtime_overhead", "operational_margin", "capacity"))))
                continue
            warnings.update(tried)
            if pp == 1:
                replica_placement = [[{"node": node["name"], "gpus": group}] for node, groups in zip(nodes, placements)
                                     for group in groups]
            else:
                usable = [(node, groups[0]) for node, groups in zip(nodes, placements) if groups]
                replica_placement = [[{"node": node["name"], "gpus": group} for node, group in usable[start:start + pp]]
                                     for start in range(0, len(usable) - pp + 1, pp)]
            return {
                "tp": tp, "pp": pp, "workers_per_replica": tp * pp,
                "backend": executor_backend(pp, options),
                "nodes_per_replica": pp,
                "replicas": len(replica_placement),
                "placement": replica_placement,
                "budget": budget,
                "max_concurrency": max_concurrency(shape, memory, tp, pp, _tokens_per_sequence(workload),
                                                   workload.get("cache_dtype") or "auto", opts),
                "warnings": sorted(warnings),
                "reasons": reasons,
            }
    details = {"weights_gib": _gib(weight_bytes(shape)), "gpu_memory_gib": _gib(memory), "tried": reasons}
    best = ""
    if best_need:
        details.update(best_tp=best_need[1], best_pp=best_need[2], best_need_gib=_gib(best_need[0]),
                       capacity_gib=best_need[3]["gib"]["capacity"])
        best = "; the closest, tp=%d pp=%d, needs %.1f GiB per GPU of %.1f GiB usable" % (
            best_need[1], best_need[2], _gib(best_need[0]), best_need[3]["gib"]["capacity"])
    raise PlanError(
        "model does not fit: %.1f GiB of weights on %d node(s) of %.1f GiB GPUs%s. Fix: more or larger GPUs, "
        "quantization, an fp8 KV cache (cache_dtype: fp8), a shorter max_model_len or lower concurrency" % (
            _gib(weight_bytes(shape)), len(nodes), _gib(memory), best), details)


def validate_parallelism(shape, nodes, tp, pp, workload, options=None):
    """Check a chosen tp/pp for the nodes of one replica; errors name the variable and the fix."""
    opts = _options(options)
    errors, warnings = [], set()
    var_tp, var_pp = "vllm_cluster_replicas.tensor_parallel_size", "vllm_cluster_replicas.pipeline_parallel_size"
    for name, value in ((var_tp, tp), (var_pp, pp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return {"ok": False, "errors": ["%s must be a positive integer, got %r" % (name, value)], "warnings": [],
                    "budget": None, "max_concurrency": 0}
    available = sum(node["gpu_count"] for node in nodes)
    per_node = min(node["gpu_count"] for node in nodes)
    if tp * pp > available:
        errors.append("tp*pp=%d GPU workers but the replica's hosts have %d GPUs; lower %s/%s or add hosts" % (
            tp * pp, available, var_tp, var_pp))
    if tp > per_node:
        errors.append("%s=%d is larger than the %d GPUs of one node: a TP group never crosses nodes; use TP<=%d and "
                      "pipeline stages across nodes" % (var_tp, tp, per_node, per_node))
    if len(nodes) > 1 and pp > len(nodes):
        errors.append("%s=%d but the replica spans %d node(s); list one host per stage" % (var_pp, pp, len(nodes)))
    if len(nodes) > 1 and pp < len(nodes):
        errors.append("%s=%d but %d hosts are listed; a replica spans nodes only through PP stages" % (var_pp, pp, len(nodes)))
    if shape["heads"] % tp:
        errors.append("%s=%d does not divide the model's %d attention heads; pick a divisor" % (var_tp, tp, shape["heads"]))
    if pp > shape["layers"]:
        errors.append("%s=%d exceeds the model's %d layers" % (var_pp, pp, shape["layers"]))
    sku = _sku_error(nodes)
    if sku:
        errors.append(sku)
    for node in nodes:
        if tp <= node["gpu_count"] and _has_nvlink(node) and not _tp_placement(node, tp, opts, warnings):
            largest = max(len(island) for island in node["islands"])
            errors.append("node %s: TP=%d does not fit inside one NVLink island (largest has %d GPUs); set %s<=%d" % (
                node["name"], tp, largest, var_tp, largest))
        elif tp <= node["gpu_count"] and not _has_nvlink(node):
            if tp > 1 and node.get("islands") and not opts["allow_tp_over_pcie"]:
                errors.append("node %s: TP=%d would cross PCIe (the node has no NVLink) and planner option "
                              "allow_tp_over_pcie is false; use tensor_parallel_size=1 and more replicas, or allow it" % (
                                  node["name"], tp))
            _tp_placement(node, tp, opts, warnings)
        if node.get("mig_enabled") and tp > 1:
            errors.append("node %s has MIG enabled: MIG slices cannot form a TP group; disable MIG or use TP=1" % node["name"])
    if errors:
        return {"ok": False, "errors": errors, "warnings": sorted(warnings), "budget": None, "max_concurrency": 0}
    memory = min(_node_memory(node) for node in nodes)
    budget = memory_budget(shape, memory, tp, pp, workload, options=opts)
    if not budget["fits"]:
        errors.append("tp=%d pp=%d needs %.1f GiB per GPU (weights %.1f + KV %.1f for %d tokens + overhead %.1f + margin %.1f) "
                      "but %.1f GiB is usable; raise %s or %s, quantize, use an fp8 KV cache, or lower "
                      "vllm_cluster_workload.max_model_len/concurrency" % (
                          (tp, pp, budget["gib"]["total"], budget["gib"]["weights"], budget["gib"]["kv_cache"],
                           budget["kv_tokens"], budget["gib"]["runtime_overhead"], budget["gib"]["operational_margin"],
                           budget["gib"]["capacity"], var_tp, var_pp)))
    tokens = _tokens_per_sequence(workload)
    return {
        "ok": not errors, "errors": errors, "warnings": sorted(warnings), "budget": budget,
        "max_concurrency": max_concurrency(shape, memory, tp, pp, tokens, workload.get("cache_dtype") or "auto", opts),
    }
