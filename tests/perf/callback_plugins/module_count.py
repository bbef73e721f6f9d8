# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve.vllm_cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Counts, per host, the task runs that reached the host (a module sent and run there), for tests/perf/bench.py."""

from __future__ import annotations

DOCUMENTATION = r"""
name: module_count
type: aggregate
short_description: count the module executions of a playbook run, per host
description:
  - >-
    Counts every task result that ran a module on a host (each loop item counts once); skipped tasks and the actions
    that run on the controller alone (set_fact, assert, include_*, meta, ...) are not counted.
  - >-
    Writes, per host, the count and the count of each task as JSON to the file that E(LLMSERVE_MODULE_COUNT_FILE)
    names.
requirements:
  - enable in ansible.cfg or with E(ANSIBLE_CALLBACKS_ENABLED=module_count)
"""

import collections
import json
import os

from ansible.plugins.callback import CallbackBase

# Actions whose whole work happens in the controller's Python: no module reaches the host.
CONTROLLER_ONLY = frozenset(
    "ansible.builtin." + name for name in (
        "set_fact", "assert", "fail", "debug", "include_tasks", "import_tasks", "include_role", "import_role",
        "include_vars", "meta", "add_host", "group_by", "set_stats", "pause", "validate_argument_spec",
    ))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "module_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._counts = collections.defaultdict(collections.Counter)

    @staticmethod
    def _action(task):
        action = task.action
        return action if "." in action else "ansible.builtin." + action

    def _count(self, result, *_args, **_kwargs):
        task = result._task  # pylint: disable=protected-access
        if self._action(task) in CONTROLLER_ONLY:
            return
        self._counts[result._host.get_name()][task.get_name()] += 1  # pylint: disable=protected-access

    def _final(self, result, *_args, **_kwargs):
        if not result._task.loop:  # pylint: disable=protected-access
            self._count(result)

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_unreachable = _final
    v2_runner_item_on_ok = v2_runner_item_on_failed = _count

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("LLMSERVE_MODULE_COUNT_FILE")
        if not path:
            return
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({host: {"modules": sum(tasks.values()), "by_task": dict(tasks)} for host, tasks in self._counts.items()},
                      handle, indent=1, sort_keys=True)
