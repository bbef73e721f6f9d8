#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_plan
short_description: Plan GPU memory and parallelism for vLLM replicas, or refuse with the numbers
version_added: 0.1.0
description:
  - Resolves each GPU node from what the host reported (M(llmserve.vllm_cluster.gpu_facts),
    M(llmserve.vllm_cluster.gpu_topology)) or, before hosts are reachable, from the declared
    C(vllm_cluster_node_gpus); a disagreement between the two is an error.
  - Budgets memory per GPU in this order, weights, KV cache, runtime overhead, operational margin, and
    recommends the smallest tensor-parallel size that fits inside one NVLink island, adding pipeline
    stages across nodes only when no single node holds a replica.
  - Checks every replica of O(replicas) (TP/PP against GPUs, islands, nodes, heads, memory); with no
    replicas given, the recommendation becomes the layout.
  - Read only; intended to run on the controller (C(delegate_to=localhost), C(run_once=true)).
author:
  - llmserve maintainers (@llmserve)
options:
  model:
    description:
      - The model, as in C(vllm_cluster_model).
      - Needs one of C(config) (the model's C(config.json) as a dict), C(config_path) (path to C(config.json)
        where the module runs) or C(shape) (a normalised shape); optional C(params) (parameter count) and
        C(max_model_len) (the model's limit when the config lacks it).
    type: dict
    required: true
  workload:
    description:
      - Serving workload, as in C(vllm_cluster_workload). C(max_model_len) and C(concurrency) are required;
        C(prompt_tokens), C(output_tokens) and C(cache_dtype) are optional.
    type: dict
    required: true
  nodes:
    description:
      - One item per GPU host with C(name), C(declared) (C(vllm_cluster_node_gpus)), C(facts)
        (the C(vllm_cluster_gpus) fact or null) and C(topology) (the gpu_topology result or null).
    type: list
    elements: dict
    required: true
  replicas:
    description:
      - Replica layout, as in C(vllm_cluster_replicas); empty means adopt the recommendation.
      - A replica may name its GPUs, C(gpus), as a list of indices (the same on each of its hosts) or a dict of
        host to such a list, in stage order; each C(tensor_parallel_size) indices in a row must lie in one NVLink
        island. Replicas without C(gpus) get free GPUs, each TP group inside one island, best fit.
      - A replica without C(port) gets the lowest port from 8000 up that no other replica or service holds on its
        first host.
    type: list
    elements: dict
    default: []
  node_group:
    description: Name of the inventory group the nodes came from, for error messages.
    type: str
    default: vllm_nodes
  reserved_ports:
    description:
      - Ports other services hold, as a dict of host name to a dict of port to what holds it (the load
        balancer's port, for instance); a replica listening on one of them is an error.
    type: dict
    default: {}
  planner_options:
    description:
      - Planner knobs passed through, e.g. C(gpu_memory_utilization), C(margin_fraction), C(max_pp).
    type: dict
    default: {}
extends_documentation_fragment:
  - llmserve.vllm_cluster.read_only
"""

EXAMPLES = r"""
- name: Plan from declared hardware
  llmserve.vllm_cluster.vllm_plan:
    model: "{{ vllm_cluster_model }}"
    workload: {max_model_len: 8192, concurrency: 32}
    nodes:
      - name: gpu-a
        declared: {count: 4, sku: NVIDIA H100 80GB HBM3, memory_mib: 81559, islands: [[0, 1, 2, 3]]}
  delegate_to: localhost
  run_once: true
  register: plan
"""

RETURN = r"""
recommendation:
  description: The planner's recommendation over all nodes (C(tp), C(pp), C(backend), C(placement), C(budget), ...).
  returned: when a configuration fits
  type: dict
replicas:
  description:
    - Every replica with C(name), C(hosts), C(tensor_parallel_size), C(pipeline_parallel_size), C(backend)
      (V(mp) on one node, V(ray) across nodes), C(port) (its API port on its first host), C(gpus) (host to the GPU
      indices it owns there, stage order), C(budget) and C(max_concurrency).
  returned: always
  type: list
  elements: dict
hosts:
  description:
    - Per node, C(gpus) (every GPU the replicas own there) and C(ray_gpus) (the pool the node's Ray daemon offers,
      only the GPUs of replicas on the Ray executor, so Ray never places a worker on another replica's GPU).
  returned: always
  type: dict
  sample: {gpu-a: {gpus: [0, 1, 2, 3, 4, 5, 6, 7], ray_gpus: []}}
nodes:
  description: Resolved nodes (GPU count, SKU, memory per GPU in bytes, islands, where it came from).
  returned: always
  type: list
  elements: dict
warnings_found:
  description: Planner warnings, such as TP over PCIe.
  returned: always
  type: list
  elements: str
summary:
  description: One human-readable line per replica.
  returned: always
  type: list
  elements: str
  sample: ["r0: tp=4 pp=1 backend=mp on gpu-a; per GPU 35.2 GiB weights + 9.8 GiB KV ...; max concurrency 118"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._cluster import plan_cluster
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._planner import PlanError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model=dict(type="dict", required=True),
            workload=dict(type="dict", required=True),
            nodes=dict(type="list", elements="dict", required=True),
            replicas=dict(type="list", elements="dict", default=[]),
            node_group=dict(type="str", default="vllm_nodes"),
            planner_options=dict(type="dict", default={}),
            reserved_ports=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    try:
        result, errors = plan_cluster(module.params)
    except PlanError as exc:
        module.fail_json(msg="preflight plan refused: %s" % exc, errors=[str(exc)], details=getattr(exc, "details", {}))
    if errors:
        module.fail_json(msg="preflight plan found %d problem(s):\n- %s" % (len(errors), "\n- ".join(errors)),
                         errors=errors, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
