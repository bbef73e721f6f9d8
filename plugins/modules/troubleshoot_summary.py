#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: troubleshoot_summary
short_description: Name the likely cause of the guide's five vLLM cluster failure patterns from collected evidence
version_added: 0.1.0
description:
  - Reads the evidence C(playbooks/collect.yml) gathers (Ray membership, firewall tables, NCCL/Gloo environment and
    interface addresses, model path and manifest per node, GPU memory, vLLM logs and C(/metrics), HAProxy state,
    counters and timeouts) and says, for each pattern, whether the evidence points at it and why.
  - "The patterns: more GPUs made it slower; a multi-node replica hangs; one GPU runs out of memory; latency spikes on
    long prompts (KV cache pressure by prompt-length bucket); works directly but fails behind the load balancer."
  - Changes nothing; runs wherever the evidence is (the controller).
author:
  - llmserve maintainers (@llmserve)
options:
  evidence:
    description: The collected evidence; its schema is in the module_utils C(_troubleshoot) docstring.
    type: dict
    required: true
  haproxy_config:
    description: HAProxy's configuration text, read for its timeouts when O(evidence) carries none.
      Raw node captures (C(captures)) and HAProxy's C(stat_csv) are parsed here.
    type: str
    default: ""
  name:
    description: The bundle's name, for the summary's title.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reads only; the same result in check mode.
  diff_mode:
    support: none
    description: Writes nothing, so there is nothing to diff.
"""

EXAMPLES = r"""
- name: Name the likely causes
  llmserve.vllm_cluster.troubleshoot_summary:
    evidence: "{{ collected }}"
    haproxy_config: "{{ haproxy_cfg_text }}"
    name: bundle-20261204T050000Z
  delegate_to: localhost
  register: summary
"""

RETURN = r"""
results:
  description: One entry per pattern, likely ones first.
  returned: always
  type: list
  elements: dict
  sample: [{"pattern": "lb_only_failure", "title": "Works against a replica directly, fails behind the load balancer",
            "likely": true, "findings": ["HAProxy timeout server is 5 s: a stream longer than that is cut"]}]
likely:
  description: The titles of the patterns the evidence points at.
  returned: always
  type: list
  elements: str
markdown:
  description: The summary as Markdown (SUMMARY.md of the bundle).
  returned: always
  type: str
evidence:
  description: The evidence as the analysis read it (raw captures parsed into addresses, units, GPUs, HAProxy servers).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _troubleshoot


def main():
    module = AnsibleModule(
        argument_spec={
            "evidence": {"type": "dict", "required": True},
            "haproxy_config": {"type": "str", "default": ""},
            "name": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    evidence = _troubleshoot.normalize(module.params["evidence"], module.params["haproxy_config"])
    results = _troubleshoot.analyse(evidence)
    module.exit_json(changed=False, results=results, likely=[entry["title"] for entry in results if entry["likely"]],
                     markdown=_troubleshoot.render_markdown(results, module.params["name"]), evidence=evidence)


if __name__ == "__main__":
    main()
