# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which settings, and which inventory variables, differ between a replica's previous and new files (docs in the .yml)."""

from __future__ import annotations

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _rollout


def vllm_setting_changes(after, before):
    """{setting, change, variable} for each setting that differs from ``before`` to ``after``; never a value."""
    return _rollout.setting_changes(before, after)


def vllm_rollout_restarts(pending, replica_names):
    """[{replica, hosts: {host: [what changed]}}] in plan order, from the vllm_serve_pending_restarts entries."""
    return _rollout.restarts(pending, replica_names)


class FilterModule:
    """llmserve.vllm_cluster rollout filters."""

    def filters(self):
        return {"vllm_setting_changes": vllm_setting_changes, "vllm_rollout_restarts": vllm_rollout_restarts}
