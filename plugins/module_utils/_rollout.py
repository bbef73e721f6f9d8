# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What differs between a replica's previous and new unit or environment file, by setting name and the inventory
variable behind it. Values never appear in the answer: an environment file holds the API key."""

from __future__ import annotations

import shlex

# Environment names the roles write themselves, and the variable that sets each; any other name is the operator's.
_ENV_VARIABLES = {
    "VLLM_API_KEY": "vllm_cluster_api_key",
    "VLLM_HOST_IP": "nccl_cluster_address",
    "RAY_ADDRESS": "the Ray head (ray_cluster)",
    "VLLM_USE_FLASHINFER_SAMPLER": "vllm_serve_flashinfer_sampler",
}
_PLAN = "vllm_cluster_replicas (the plan)"
_FLAG_VARIABLES = {
    "--served-model-name": "vllm_cluster_model['served_name']",
    "--revision": "vllm_cluster_model['revision']",
    "--max-model-len": "vllm_cluster_workload['max_model_len']",
    "--gpu-memory-utilization": "vllm_serve_gpu_memory_utilization",
    "--host": "nccl_cluster_address",
    "--port": _PLAN,
    "--headless": _PLAN,
    "--tensor-parallel-size": _PLAN,
    "--pipeline-parallel-size": _PLAN,
    "--distributed-executor-backend": _PLAN,
    "--nnodes": _PLAN,
    "--node-rank": _PLAN,
    "--master-addr": _PLAN,
    "--master-port": "vllm_serve_master_port",
}
_DIRECTIVE_VARIABLES = {
    "Environment CUDA_VISIBLE_DEVICES": _PLAN,
    "DeviceAllow": _PLAN,
    "User": "vllm_serve_user",
    "Group": "vllm_serve_user",
}


def _logical_lines(text):
    """Lines with systemd's backslash continuations joined; comments and blanks dropped."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _command_settings(command):
    """A command line as {setting: value}: the program, the model path and each --flag with its value."""
    try:
        words = shlex.split(command)
    except ValueError:
        return {"ExecStart": command}
    settings, index = {}, 0
    positional = ["program", "subcommand", "model path"]
    while index < len(words):
        word = words[index]
        if word.startswith("--"):
            name, _sep, inline = word.partition("=")
            has_value = index + 1 < len(words) and not words[index + 1].startswith("--") and not _sep
            settings[name] = inline if _sep else (words[index + 1] if has_value else "")
            index += 2 if has_value else 1
            continue
        settings[positional.pop(0) if positional else "argument %s" % word] = word
        index += 1
    return settings


def _settings(text):
    """A unit or environment file as {setting: value}."""
    settings, section = {}, ""
    for line in _logical_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _sep, value = line.partition("=")
        key = key.strip()
        if not section:
            settings["env " + key] = value
        elif key == "ExecStart":
            settings.update(("ExecStart " + flag, flag_value) for flag, flag_value in _command_settings(value).items())
        elif key == "Environment":
            settings["Environment " + value.partition("=")[0]] = value
        else:
            # Repeated directives (EnvironmentFile=, DeviceAllow=) are one setting holding every value.
            settings[key] = settings[key] + "\n" + value if key in settings else value
    return settings


def _variable(setting):
    kind, _sep, name = setting.partition(" ")
    if kind == "env":
        return _ENV_VARIABLES.get(name, "vllm_serve_environment['%s']" % name)
    if kind == "ExecStart":
        if name == "program":
            return "vllm_runtime (the pinned vLLM and its directory)"
        if name == "model path":
            return "vllm_cluster_model (the staged snapshot)"
        return _FLAG_VARIABLES.get(name, "vllm_serve_extra_args")
    return _DIRECTIVE_VARIABLES.get(setting, _DIRECTIVE_VARIABLES.get(kind, "the vllm_serve role's unit template"))


def setting_changes(before, after):
    """Each setting added, removed or changed from ``before`` to ``after`` (unit or environment file texts), as
    {setting, change, variable}, sorted by setting. Values are left out on purpose."""
    old, new = _settings(before or ""), _settings(after or "")
    changes = []
    for setting in sorted(set(old) | set(new)):
        if setting not in old:
            change = "added"
        elif setting not in new:
            change = "removed"
        elif old[setting] != new[setting]:
            change = "changed"
        else:
            continue
        changes.append({"setting": setting, "change": change, "variable": _variable(setting)})
    return changes


def restarts(pending, replica_names):
    """The replicas a rollout restarts, in plan order: [{replica, hosts: {host: [what changed]}}] from the entries
    vllm_serve lists in vllm_serve_pending_restarts (one per replica and host)."""
    by_replica = {}
    for entry in pending or []:
        by_replica.setdefault(entry["replica"], {})[entry["host"]] = list(entry.get("changed") or [])
    return [{"replica": name, "hosts": by_replica[name]} for name in replica_names if name in by_replica]
