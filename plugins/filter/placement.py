# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU ownership of one unit as a Jinja filter (documentation in the sidecar .yml file)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._placement import unit_gpus


def vllm_unit_gpus(indices, facts_gpus=None):
    """GPU indices (+ the host's GPU facts) -> CUDA_VISIBLE_DEVICES and the device nodes the unit may open."""
    try:
        return unit_gpus(indices, facts_gpus)
    except ValueError as exc:
        raise AnsibleFilterError("vllm_unit_gpus: %s" % exc)


class FilterModule:
    """llmserve.vllm_cluster placement filters."""

    def filters(self):
        return {"vllm_unit_gpus": vllm_unit_gpus}
