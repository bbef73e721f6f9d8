# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn what inventory declares and what hosts report into planner nodes, and check replica layouts.

Pure functions. Every message names the variable to change and how, because these are the
errors an operator sees in preflight before any host is touched.
"""

from __future__ import annotations

import json

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._planner import (
    GIB,
    PlanError,
    executor_backend,
    model_shape_from_config,
    normalize_shape,
    plan_parallelism,
    validate_parallelism,
)
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._inputs import model_errors, replica_name_errors
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._placement import (
    assign_gpus,
    assign_ports,
    host_gpus,
    stages_on_host,
)

_MIB = 1024 * 1024
WORKLOAD_KEYS = ("max_model_len", "concurrency", "prompt_tokens", "output_tokens", "cache_dtype")
REPLICA_KEYS = ("name", "hosts", "tensor_parallel_size", "pipeline_parallel_size", "port", "gpus")
_DECLARED = "vllm_cluster_node_gpus"


def _declared_error(name, message):
    return "node %s: %s (set %s in host_vars/%s or group_vars)" % (name, message, _DECLARED, name)


def resolve_node(raw):
    """Return ``(node, errors)`` for one inventory host.

    ``raw`` holds ``name``, ``declared`` (vllm_cluster_node_gpus), ``facts`` (the
    gpu_facts result or None) and ``topology`` (the gpu_topology result or None).
    Facts from the host win over the declaration; a disagreement is an error, since
    a plan made for the wrong hardware fails only at model load, on the host.
    """
    name = raw["name"]
    declared = raw.get("declared") or {}
    facts = raw.get("facts") or {}
    topology = raw.get("topology") or {}
    errors = []
    node = {"name": name, "source": "declared", "mig_enabled": False}

    if facts.get("gpu_count"):
        skus = facts.get("skus") or []
        if len(skus) > 1:
            errors.append("node %s mixes GPU models (%s): one replica needs one SKU; pin each replica to one model with "
                          "CUDA_VISIBLE_DEVICES or split the node" % (name, ", ".join(skus)))
        memory_mib = min(gpu["memory_total_mib"] for gpu in facts["gpus"])
        node.update(source="facts", gpu_count=facts["gpu_count"], gpu_name=skus[0] if skus else None,
                    gpu_memory_bytes=memory_mib * _MIB, mig_enabled=bool(facts.get("mig_enabled")),
                    driver_version=facts.get("driver_version"))
        if declared.get("count") not in (None, facts["gpu_count"]):
            errors.append(_declared_error(name, "%s.count is %s but the host reports %d GPUs" % (
                _DECLARED, declared["count"], facts["gpu_count"])))
        if declared.get("sku") not in (None, node["gpu_name"]):
            errors.append(_declared_error(name, "GPU SKU mismatch: %s.sku is %r but the host reports %r" % (
                _DECLARED, declared["sku"], node["gpu_name"])))
    else:
        missing = [key for key in ("count", "sku", "memory_mib") if not declared.get(key)]
        if missing:
            why = facts.get("reason") or "no GPU facts gathered"
            errors.append(_declared_error(name, "no GPU found (%s) and %s lacks %s" % (why, _DECLARED, ", ".join(missing))))
            return None, errors
        node.update(gpu_count=int(declared["count"]), gpu_name=declared["sku"],
                    gpu_memory_bytes=int(declared["memory_mib"]) * _MIB)

    islands = topology.get("islands") or declared.get("islands")
    if islands:
        node["islands"] = [list(island) for island in islands]
    return node, errors


def resolve_nodes(raw_nodes, node_group="vllm_nodes"):
    """Resolve every host; returns ``(nodes_by_name, errors)``."""
    if not raw_nodes:
        return {}, ["inventory group %s is empty or missing: put the GPU hosts in it, or set preflight_node_group" % node_group]
    nodes, errors = {}, []
    for raw in raw_nodes:
        node, node_errors = resolve_node(raw)
        errors.extend(node_errors)
        if node is not None:
            nodes[node["name"]] = node
    return nodes, errors


def replica_gpu_usage(replicas):
    """GPUs each host gives to the replicas: one PP stage (tp GPUs) per host, or tp*pp when one host holds them all."""
    usage = {}
    for replica in replicas:
        hosts = replica["hosts"]
        per_host = replica["tensor_parallel_size"] * stages_on_host(replica)
        for host in hosts:
            usage.setdefault(host, []).append((replica["name"], per_host))
    return usage


def _gpu_fit_errors(index, replica, nodes):
    """One replica against its own hosts' GPU counts, before replicas sharing a host are added up."""
    label = "vllm_cluster_replicas[%d] (%s)" % (index, replica["name"])
    tp, pp, hosts = replica["tensor_parallel_size"], replica["pipeline_parallel_size"], replica["hosts"]
    if not all(isinstance(value, int) and not isinstance(value, bool) and value > 0 for value in (tp, pp)):
        return ["%s: tensor_parallel_size and pipeline_parallel_size must be positive integers, got %r and %r" % (
            label, tp, pp)]
    smallest = min(hosts, key=lambda host: nodes[host]["gpu_count"])
    have = nodes[smallest]["gpu_count"]
    if tp > have:
        return ["%s.tensor_parallel_size=%d is larger than the %d GPU(s) of %s: a TP group never crosses nodes; use "
                "tensor_parallel_size<=%d and pipeline stages across nodes" % (label, tp, have, smallest, have)]
    if len(hosts) == 1 and tp * pp > have:
        return ["%s: tp*pp=%d GPU workers but %s has %d GPU(s); lower pipeline_parallel_size or tensor_parallel_size, "
                "or list one host per pipeline stage" % (label, tp * pp, smallest, have)]
    return []


def check_replica_layout(replicas, nodes, reserved_ports=None):
    """Structural checks over all replicas; returns error strings naming vllm_cluster_replicas."""
    errors = []
    seen = set()
    for index, replica in enumerate(replicas):
        label = replica.get("name") or "#%d" % index
        errors.extend(_unknown_keys("vllm_cluster_replicas[%d] (%s)" % (index, label), replica, REPLICA_KEYS))
        for key in ("name", "hosts", "tensor_parallel_size", "pipeline_parallel_size"):
            if key not in replica:
                errors.append("vllm_cluster_replicas[%d] (%s) lacks %s" % (index, label, key))
        if replica.get("name") in seen:
            errors.append("vllm_cluster_replicas: name %s is used twice; give every replica its own name" % label)
        seen.add(replica.get("name"))
        for host in replica.get("hosts") or []:
            if host not in nodes:
                errors.append("vllm_cluster_replicas[%d] (%s): host %s is not a resolved GPU node; add it to the node group "
                              "or fix the name" % (index, label, host))
        pp = replica.get("pipeline_parallel_size")
        hosts = replica.get("hosts") or []
        if isinstance(pp, int) and hosts and pp != len(hosts) and len(hosts) > 1:
            errors.append("vllm_cluster_replicas[%d] (%s): pipeline_parallel_size=%d but %d hosts listed; one PP stage per "
                          "host, so list exactly pipeline_parallel_size hosts (or one host for PP inside a node)" % (
                              index, label, pp, len(hosts)))
    if errors:
        return errors
    for index, replica in enumerate(replicas):
        errors.extend(_gpu_fit_errors(index, replica, nodes))
    if errors:
        return errors
    errors.extend(assign_ports(replicas, reserved_ports)[1])
    for host, uses in sorted(replica_gpu_usage(replicas).items()):
        need = sum(gpus for _name, gpus in uses)
        have = nodes[host]["gpu_count"]
        if need > have:
            errors.append("host %s has %d GPUs but replicas %s need %d there; lower tensor_parallel_size or move a replica "
                          "in vllm_cluster_replicas" % (host, have, ", ".join(name for name, _gpus in uses), need))
    return errors


def _load_shape(model):
    if not isinstance(model, dict) or not model:
        raise PlanError("vllm_cluster_model is missing or empty: set id, revision and the model's config (or config_path)")
    if model.get("shape"):
        return normalize_shape(model["shape"])
    config = model.get("config")
    if config is None and model.get("config_path"):
        try:
            with open(model["config_path"]) as handle:
                config = json.load(handle)
        except (OSError, ValueError) as exc:
            raise PlanError("vllm_cluster_model.config_path %s cannot be read as JSON: %s" % (model["config_path"], exc))
    if config is None:
        raise PlanError("vllm_cluster_model needs config (the model's config.json as a dict), config_path or shape")
    return model_shape_from_config(config, params=model.get("params"))


def _unknown_keys(label, given, known):
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return []
    return ["%s has unknown key(s) %s (a typo is silently ignored otherwise); known: %s" % (
        label, ", ".join(unknown), ", ".join(known))]


def _check_workload(workload, shape):
    errors = _unknown_keys("vllm_cluster_workload", workload, WORKLOAD_KEYS)
    for key in ("max_model_len", "concurrency"):
        value = workload.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            errors.append("vllm_cluster_workload.%s must be a positive integer, got %r" % (key, value))
    limit = shape.get("max_model_len")
    if not errors and limit and workload["max_model_len"] > limit:
        errors.append("vllm_cluster_workload.max_model_len=%d is above the model's limit %d (max_position_embeddings); "
                      "lower it to at most %d" % (workload["max_model_len"], limit, limit))
    return errors


def _gib(value):
    return "%.1f GiB" % (value / float(GIB))


def _summary(replica):
    budget = replica["budget"]
    return "%s: tp=%d pp=%d backend=%s on %s, port %d; per GPU %s weights + %s KV + %s overhead + %s margin of %s usable; " \
        "max concurrency %d at max_model_len" % (
            replica["name"], replica["tensor_parallel_size"], replica["pipeline_parallel_size"], replica["backend"],
            " + ".join("%s GPUs %s" % (host, ",".join(map(str, replica["gpus"][host]))) for host in replica["hosts"]),
            replica["port"], _gib(budget["weights"]), _gib(budget["kv_cache"]),
            _gib(budget["runtime_overhead"]), _gib(budget["operational_margin"]), _gib(budget["capacity"]),
            replica["max_concurrency"])


def _replicas_from_recommendation(recommendation):
    replicas = []
    for index, placement in enumerate(recommendation["placement"]):
        replicas.append({
            "name": "r%d" % index,
            "hosts": [stage["node"] for stage in placement],
            "tensor_parallel_size": recommendation["tp"],
            "pipeline_parallel_size": recommendation["pp"],
        })
    return replicas


def plan_cluster(params):
    """Plan or check every replica; returns ``(result, errors)``. Reads only model.config_path."""
    # Every format fault at once, before any planning: these values reach units, files and haproxy.cfg.
    errors = model_errors(params["model"]) + replica_name_errors(params["replicas"])
    shape = _load_shape(params["model"])
    workload = params["workload"] or {}
    options = params["planner_options"] or {}
    errors.extend(_check_workload(workload, shape))
    nodes, node_errors = resolve_nodes(params["nodes"], params["node_group"])
    errors.extend(node_errors)
    result = {"nodes": list(nodes.values()), "replicas": [], "hosts": {}, "warnings_found": [], "summary": []}
    if errors:
        return result, errors

    try:
        result["recommendation"] = plan_parallelism(shape, list(nodes.values()), workload, options)
        result["warnings_found"].extend(result["recommendation"]["warnings"])
    except PlanError as exc:
        if not params["replicas"]:
            return result, [str(exc)]
        result["warnings_found"].append("no recommendation: %s" % exc)

    replicas = params["replicas"] or _replicas_from_recommendation(result["recommendation"])
    layout_errors = check_replica_layout(replicas, nodes, params.get("reserved_ports"))
    if layout_errors:
        return result, layout_errors
    checks = []
    for replica in replicas:
        replica_nodes = [nodes[host] for host in replica["hosts"]]
        check = validate_parallelism(shape, replica_nodes, replica["tensor_parallel_size"], replica["pipeline_parallel_size"],
                                     workload, options)
        errors.extend("replica %s: %s" % (replica["name"], error) for error in check["errors"])
        result["warnings_found"].extend("replica %s: %s" % (replica["name"], w) for w in check["warnings"])
        checks.append(check)
    if errors:
        return result, errors
    # Placement once every replica fits on its own: which GPUs and which port each one owns.
    gpus, gpu_errors = assign_gpus(replicas, nodes)
    if gpu_errors:
        return result, gpu_errors
    ports = assign_ports(replicas, params.get("reserved_ports"))[0]
    for replica, check in zip(replicas, checks):
        entry = dict(replica, backend=executor_backend(len(replica["hosts"]), options), port=ports[replica["name"]],
                     gpus=gpus[replica["name"]], budget=check["budget"], max_concurrency=check["max_concurrency"])
        result["replicas"].append(entry)
        result["summary"].append(_summary(entry))
    # Per host: every GPU the plan gives out, and the pool Ray may hand to Ray-executor replicas (no other).
    result["hosts"] = dict((name, {"gpus": host_gpus(result["replicas"], name),
                                   "ray_gpus": host_gpus(result["replicas"], name, "ray")}) for name in nodes)
    recommendation = result.get("recommendation")
    if recommendation:
        result["summary"].insert(0, "recommended: tp=%d pp=%d backend=%s; %d replica(s) fit these nodes; max concurrency %d "
                                    "per replica at max_model_len" % (
                                        recommendation["tp"], recommendation["pp"], recommendation["backend"],
                                        recommendation["replicas"], recommendation["max_concurrency"]))
    return result, errors
