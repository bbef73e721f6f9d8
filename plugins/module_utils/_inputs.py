# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The formats of inventory values that reach unit files, environment files, haproxy.cfg and paths. Pure.

Each check returns messages that name the variable, the value's fault and the fix; the first play of deploy.yml
refuses on any of them before a host changes. A value that passes needs no quoting in a unit's ExecStart, an
EnvironmentFile or haproxy.cfg: these formats are what keeps a served name with a space and a semicolon from
restarting a serving replica under two wrong names.
"""

from __future__ import annotations

import re

# Hugging Face Hub repo ids: namespace/name, each up to 96 of [A-Za-z0-9._-], not starting with . or -.
HUB_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# Replica names become unit names (vllm-<name>.service), file names (/etc/vllm/<name>.env) and HAProxy server names.
REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Served names go on ExecStart and into HAProxy's check body; "org/model", as clients often ask for, is allowed.
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
# A bearer token: printable ASCII, no whitespace (it goes into an environment file and an HTTP header).
API_KEY = re.compile(r"^[!-~]{16,}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Flags of `vllm serve` whose value the collection sets, each with the variable that sets it.
OWNED_FLAGS = {
    "--api-key": "vllm_cluster_api_key",
    "--host": "nccl_cluster_address (the cluster address)",
    "--port": "port on the replica in vllm_cluster_replicas",
    "--served-model-name": "vllm_cluster_model.served_name",
    "--revision": "vllm_cluster_model.revision",
    "--model": "vllm_cluster_model.id",
    "--tensor-parallel-size": "tensor_parallel_size on the replica",
    "-tp": "tensor_parallel_size on the replica",
    "--pipeline-parallel-size": "pipeline_parallel_size on the replica",
    "-pp": "pipeline_parallel_size on the replica",
    "--distributed-executor-backend": "vllm_cluster_multinode_backend",
    "--max-model-len": "vllm_cluster_workload.max_model_len",
    "--gpu-memory-utilization": "vllm_serve_gpu_memory_utilization",
    "--nnodes": "the replica's hosts",
    "--node-rank": "the replica's hosts",
    "--master-addr": "the replica's first host",
    "--master-port": "vllm_serve_master_port",
    "--headless": "the replica's hosts",
}


def _shown(value):
    return repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."


def model_errors(model):
    """vllm_cluster_model: the id as a hub repo id, the served name in its format."""
    errors = []
    model = model or {}
    if "id" in model and not (isinstance(model["id"], str) and HUB_REPO_ID.match(model["id"])):
        errors.append("vllm_cluster_model.id %s is not a hub repo id (namespace/name of letters, digits, '.', '_' and '-'); "
                      "set the model's id as the hub shows it, e.g. meta-llama/Llama-3.1-8B-Instruct" % _shown(model["id"]))
    return errors + served_name_errors(model.get("served_name"), "vllm_cluster_model.served_name")


def served_name_errors(served, variable):
    """A served model name, as it goes on ExecStart and into HAProxy's check (empty is the callers' to refuse)."""
    if served in (None, "") or (isinstance(served, str) and SERVED_NAME.match(served)):
        return []
    return ["%s %s may hold only letters, digits, '.', '_', '-' and '/' (no spaces, quotes or ';'); set a plain name "
            "such as llama-3.1-8b" % (variable, _shown(served))]


def replica_name_errors(replicas):
    """vllm_cluster_replicas[*].name in the format unit and file names take."""
    errors = []
    for index, replica in enumerate(replicas or []):
        name = (replica or {}).get("name")
        if name is not None and not (isinstance(name, str) and REPLICA_NAME.match(name)):
            errors.append("vllm_cluster_replicas[%d].name %s must be 1-63 of letters, digits, '.', '_' and '-', not starting "
                          "with '.' or '-' (it names a unit and a file); rename it, e.g. r%d" % (index, _shown(name), index))
    return errors


def api_key_errors(key, variable="vllm_cluster_api_key"):
    if isinstance(key, str) and API_KEY.match(key):
        return []
    # Never show the key itself.
    return ["%s must be at least 16 printable characters with no whitespace (it goes into an environment file and an "
            "HTTP header); set it from a vault, e.g. the output of: openssl rand -hex 24" % variable]


def extra_args_errors(args, variable="vllm_serve_extra_args"):
    """Extra `vllm serve` arguments: one argument per item, no line breaks, none of the flags the collection owns."""
    errors = []
    for index, arg in enumerate(args or []):
        if not isinstance(arg, str) or any(char in arg for char in "\n\r\x00"):
            errors.append("%s[%d] holds a line break or NUL; give one argument per list item" % (variable, index))
            continue
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            errors.append("%s[%d] sets %s, which the collection sets from %s; remove it and set that instead" % (
                variable, index, flag, OWNED_FLAGS[flag]))
    return errors


# Names the roles write into the replica's environment or unit themselves: set in vllm_serve_environment they would
# silently win (a later line of the same file) or fight the plan. Each maps to where the value belongs.
OWNED_ENVIRONMENT = {
    "VLLM_API_KEY": "the API key, which vllm_cluster_api_key sets (from a vault); this copy would replace it unseen",
    "CUDA_VISIBLE_DEVICES": "the GPUs the plan gives each replica, and would let two replicas share a GPU; name them "
                            "with gpus: [...] on the replica in vllm_cluster_replicas instead",
    "VLLM_USE_FLASHINFER_SAMPLER": "the sampler choice, which vllm_serve_flashinfer_sampler owns: set it true "
                                   "(FlashInfer's sampler; the unit then needs nvcc, ninja and CUDA_HOME) or leave it "
                                   "false (vLLM's own sampler, no compiler at run time)",
    "RAY_ADDRESS": "the Ray head of the cluster, which the plan and the ray_cluster role give a Ray replica",
    "HF_HUB_OFFLINE": "offline mode: replicas read only the staged, verified snapshot (model_cache)",
}


def environment_errors(environment, variable="vllm_serve_environment"):
    """An environment for an EnvironmentFile: names as the shell takes them, values on one line, none of the names
    the roles own."""
    errors = []
    for name, value in sorted((environment or {}).items(), key=lambda item: str(item[0])):
        if str(name) in OWNED_ENVIRONMENT:
            errors.append("%s sets %s, which the collection writes itself: %s. Remove it from %s"
                          % (variable, name, OWNED_ENVIRONMENT[str(name)], variable))
        elif not ENV_NAME.match(str(name)):
            errors.append("%s has the name %s; environment names are letters, digits and '_', not starting with a digit"
                          % (variable, _shown(name)))
        elif any(char in str(value) for char in "\n\r\x00"):
            errors.append("%s[%s] holds a line break or NUL, which would start a new variable in the environment file; "
                          "put it on one line" % (variable, name))
    return errors
