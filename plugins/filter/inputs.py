# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The formats of values that reach units, environment files and haproxy.cfg, as a Jinja filter (docs in the .yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _inputs

_CHECKS = {
    "api_key": _inputs.api_key_errors,
    "extra_args": _inputs.extra_args_errors,
    "environment": _inputs.environment_errors,
    "model": lambda value, _variable: _inputs.model_errors(value),
    "served_name": _inputs.served_name_errors,
    "replicas": lambda value, _variable: _inputs.replica_name_errors(value),
}


def vllm_input_errors(value, kind, variable):
    """Messages naming ``variable`` for each way ``value`` breaks the format of ``kind``; empty when it is fine."""
    if kind not in _CHECKS:
        raise AnsibleFilterError("vllm_input_errors: unknown kind %r (one of %s)" % (kind, ", ".join(sorted(_CHECKS))))
    return _CHECKS[kind](value, variable)


class FilterModule:
    """llmserve.vllm_cluster input format filters."""

    def filters(self):
        return {"vllm_input_errors": vllm_input_errors}
