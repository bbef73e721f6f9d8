#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_ready
short_description: Wait until a vLLM replica answers a real completion, or fail as soon as its unit shows it never will
version_added: 0.1.0
description:
  - The one readiness definition of the collection. Sends a one-token completion to the replica's API until it
    answers 200; C(/health) is not enough, since the API server answers it before the engine has sampled once.
  - With O(unit), runs on the replica's API host and watches its systemd unit between attempts. The wait fails
    within one interval when the unit's process is gone (inactive or failed) or systemd is restarting it
    (auto-restart, a new main PID, more restarts than when the wait began), and the failure carries the last
    lines of the unit's journal.
author:
  - llmserve maintainers (@llmserve)
options:
  url:
    description: The replica's API base, C(http://<cluster address>:<port>) (the address vLLM binds).
    type: str
    required: true
  model:
    description: The served model name.
    type: str
    required: true
  api_key:
    description: The API key (sent as a bearer token, never logged).
    type: str
    default: ""
  unit:
    description: The replica's systemd unit on this host (C(vllm-<replica>.service)); empty watches no unit.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for a completion before failing.
    type: int
    default: 600
  interval:
    description: Seconds between attempts.
    type: float
    default: 1.0
  log_lines:
    description: Journal lines of the unit to include when the wait fails.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Sends one completion and reports whether the replica answers; does not wait.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to show.
"""

EXAMPLES = r"""
- name: Wait for replica r0, failing fast if its engine dies
  llmserve.vllm_cluster.vllm_ready:
    url: http://10.0.0.11:8000
    model: llama-3.1-8b
    api_key: "{{ vllm_cluster_api_key }}"
    unit: vllm-r0.service
    timeout: 900
"""

RETURN = r"""
ready:
  description: Whether a completion answered.
  returned: always
  type: bool
waited_s:
  description: Seconds from the first attempt to the answer (or to the failure).
  returned: always
  type: float
  sample: 41.3
attempts:
  description: Completions sent.
  returned: always
  type: int
at:
  description: This host's clock (epoch seconds) when the wait ended, to hold against the unit's start time.
  returned: always
  type: float
  sample: 1796600000.5
reason:
  description: Why the wait ended without an answer (null when ready).
  returned: always
  type: str
  sample: "systemd is restarting it: its process exited (status 1)"
log_tail:
  description: The last lines of the unit's journal, when the wait failed and a unit was watched.
  returned: on failure
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _readiness


def probe(url, model, key):
    target, body, headers = _readiness.completion_request(url, model, key)
    try:
        response = open_url(target, data=body, headers=headers, method="POST", timeout=30)
        return response.status == 200, "HTTP %d" % response.status
    except Exception as exc:  # pylint: disable=broad-except  # not answering yet is the normal case
        return False, str(exc)[:200]


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "unit": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 600},
            "interval": {"type": "float", "default": 1.0},
            "log_lines": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    params = module.params
    unit = params["unit"]
    systemctl = module.get_bin_path("systemctl", required=bool(unit))

    def read_unit():
        if not unit:
            return None
        _rc, out, _err = module.run_command([systemctl, "show", "--property=" + ",".join(_readiness.UNIT_PROPERTIES),
                                             unit])
        return _readiness.parse_unit_show(out)

    timeout = 0 if module.check_mode else params["timeout"]
    result = _readiness.wait(lambda: probe(params["url"], params["model"], params["api_key"]), read_unit,
                             time.monotonic, time.sleep, timeout, params["interval"])
    result["changed"] = False
    result["at"] = time.time()
    if result["ready"] or module.check_mode:
        module.exit_json(**result)
    tail = []
    if unit:
        journalctl = module.get_bin_path("journalctl")
        if journalctl:
            _rc, out, _err = module.run_command([journalctl, "--no-pager", "--output=cat", "-n", str(params["log_lines"]),
                                                 "-u", unit])
            tail = out.splitlines()
    module.fail_json(msg="replica at %s is not ready: %s (last answer: %s)%s" % (
        params["url"], result["reason"], result["detail"],
        "; last lines of %s:\n%s" % (unit, "\n".join(tail)) if tail else ""), log_tail=tail, **result)


if __name__ == "__main__":
    main()
