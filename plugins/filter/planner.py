# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The memory and parallelism planner as Jinja filters (documentation in the sidecar .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._planner import (
    PlanError,
    kv_bytes_per_token,
    memory_budget,
    model_shape_from_config,
    normalize_shape,
    plan_parallelism,
)


def _shape(shape_or_config):
    """Accept a normalised shape (has ``layers``) or a raw config.json dict."""
    if isinstance(shape_or_config, dict) and "layers" in shape_or_config:
        return normalize_shape(shape_or_config)
    return model_shape_from_config(shape_or_config)


def _filter(function):
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except PlanError as exc:
            raise AnsibleFilterError("%s: %s" % (function.__name__, exc))
    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


@_filter
def vllm_model_shape(config, params=None):
    """config.json dict -> normalised model shape."""
    return model_shape_from_config(config, params=params)


@_filter
def vllm_kv_bytes_per_token(shape_or_config, cache_dtype="auto", tp=1, pp=1):
    """KV-cache bytes per token on one GPU."""
    return kv_bytes_per_token(_shape(shape_or_config), cache_dtype, tp, pp)


@_filter
def vllm_memory_budget(shape_or_config, gpu_memory_bytes, workload, tp=1, pp=1, options=None):
    """Per-GPU memory budget: weights, KV cache, runtime overhead, operational margin."""
    return memory_budget(_shape(shape_or_config), int(gpu_memory_bytes), tp, pp, workload, options=options)


@_filter
def vllm_plan_parallelism(shape_or_config, nodes, workload, options=None):
    """Recommended tp/pp, backend, placement and budget, or an error with the numbers."""
    return plan_parallelism(_shape(shape_or_config), nodes, workload, options)


class FilterModule:
    """llmserve.vllm_cluster planner filters."""

    def filters(self):
        return {
            "vllm_model_shape": vllm_model_shape,
            "vllm_kv_bytes_per_token": vllm_kv_bytes_per_token,
            "vllm_memory_budget": vllm_memory_budget,
            "vllm_plan_parallelism": vllm_plan_parallelism,
        }
