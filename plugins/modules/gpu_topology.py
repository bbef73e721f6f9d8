#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Read the GPU link matrix and NVLink islands from nvidia-smi topo -m
version_added: 0.1.0
description:
  - Runs C(nvidia-smi topo -m) and returns the GPU link matrix, the NVLink islands (maximal groups of GPUs
    joined pairwise by NVLink), each GPU's CPU and NUMA affinity, and each NIC with its nearest GPUs.
  - Can assert that a tensor-parallel group of a given size fits inside one NVLink island, and that the
    links inside the group are at least a given class; failures name the GPUs and the link found.
author:
  - llmserve maintainers (@llmserve)
options:
  require_tp_size:
    description:
      - Fail unless this many GPUs fit inside one NVLink island on the host.
      - A TP group that crosses PCIe or the CPU interconnect is slow on every token.
    type: int
  require_link:
    description:
      - Minimum link class between every pair of GPUs in the TP group.
      - V(nvlink) needs NV# links; V(pcie_switch) accepts NV#, PIX or PXB (no host bridge); V(any) accepts all.
      - The group is O(tp_gpus) when given, else the first island holding O(require_tp_size) GPUs, else all GPUs.
    type: str
    choices: [nvlink, pcie_switch, any]
    default: any
  tp_gpus:
    description:
      - GPU indices of the TP group to check, instead of choosing an island.
    type: list
    elements: int
extends_documentation_fragment:
  - llmserve.vllm_cluster.read_only
"""

EXAMPLES = r"""
- name: Read the topology
  llmserve.vllm_cluster.gpu_topology:
  register: topo

- name: Insist that TP=8 stays on NVLink
  llmserve.vllm_cluster.gpu_topology:
    require_tp_size: 8
    require_link: nvlink

- name: Check the exact GPUs of one replica
  llmserve.vllm_cluster.gpu_topology:
    tp_gpus: [4, 5, 6, 7]
    require_link: nvlink
"""

RETURN = r"""
topology:
  description: The parsed matrix.
  returned: success
  type: dict
  contains:
    gpu_count:
      description: Number of GPUs in the matrix.
      type: int
      sample: 8
    gpus:
      description: Per GPU, its index, name and CPU/NUMA affinity (null where nvidia-smi prints N/A).
      type: list
      elements: dict
      sample: [{"index": 0, "name": "GPU0", "cpu_affinity": "0-51", "numa_affinity": "0", "gpu_numa_id": null}]
    matrix:
      description: GPU by GPU link tokens as printed (X, NV#, PIX, PXB, PHB, NODE, SYS).
      type: list
      elements: list
      sample: [["X", "NV18"], ["NV18", "X"]]
    islands:
      description: Maximal groups of GPU indices all pairwise joined by NVLink, largest first.
      type: list
      elements: list
      sample: [[0, 1, 2, 3, 4, 5, 6, 7]]
    nics:
      description: NICs with their device name, link to each GPU, and nearest GPUs.
      type: list
      elements: dict
      sample: [{"name": "NIC0", "device": "mlx5_0", "links": {"GPU0": "PIX"}, "nearest_gpus": [0], "nearest_link": "PIX"}]
tp_group:
  description: GPUs the link requirement was checked over, and the weakest link among them.
  returned: success
  type: dict
  sample: {"gpus": [0, 1, 2, 3], "weakest_link": "NV18", "weakest_class": "nvlink"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._topology import (
    TopologyParseError,
    check_link_requirement,
    parse_topo_matrix,
    tp_group_fits,
    weakest_link,
)


def _island_text(island):
    return ",".join("GPU%d" % i for i in island)


def _tp_group(topology, tp_size, tp_gpus):
    """Pick the group to check and return ``(gpus, error)``."""
    if tp_gpus:
        gpus = sorted(set(tp_gpus))
        if tp_size and len(gpus) != tp_size:
            return None, "tp_gpus lists %d GPU(s) but require_tp_size=%d" % (len(gpus), tp_size)
        if tp_size and len(gpus) > 1 and weakest_link(topology, gpus)["class"] != "nvlink":
            weakest = weakest_link(topology, gpus)
            return None, "tp_gpus %s are not inside one NVLink island: GPU%d and GPU%d are joined by %s" % (
                _island_text(gpus), weakest["between"][0], weakest["between"][1], weakest["link"])
        return gpus, None
    if not tp_size:
        return list(range(topology["gpu_count"])), None
    if tp_size > topology["gpu_count"]:
        return None, "require_tp_size=%d but this host has %d GPU(s)" % (tp_size, topology["gpu_count"])
    fit = tp_group_fits(topology, tp_size)
    if fit["fits"]:
        return fit["island"][:tp_size], None
    largest = topology["islands"][0]
    across = weakest_link(topology, list(range(topology["gpu_count"])))
    return None, ("require_tp_size=%d does not fit inside one NVLink island: the largest island is %s (%d GPU(s)); "
                  "GPU%d and GPU%d are joined by %s. Lower tensor_parallel_size to %d or add pipeline stages" % (
                      tp_size, _island_text(largest), len(largest), across["between"][0], across["between"][1],
                      across["link"], len(largest)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require_tp_size=dict(type="int"),
            require_link=dict(type="str", default="any", choices=["nvlink", "pcie_switch", "any"]),
            tp_gpus=dict(type="list", elements="int"),
        ),
        supports_check_mode=True,
    )
    nvidia_smi = module.get_bin_path("nvidia-smi", required=True)
    cmd = [nvidia_smi, "topo", "-m"]
    rc, stdout, stderr = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg="nvidia-smi topo -m failed", rc=rc, stdout=stdout, stderr=stderr, cmd=cmd)
    try:
        topology = parse_topo_matrix(stdout)
        gpus, error = _tp_group(topology, module.params["require_tp_size"], module.params["tp_gpus"])
        if error:
            module.fail_json(msg=error, topology=topology)
        error = check_link_requirement(topology, gpus, module.params["require_link"])
        weakest = weakest_link(topology, gpus)
    except TopologyParseError as exc:
        module.fail_json(msg="cannot use nvidia-smi topo -m output: %s" % exc, rc=rc, stdout=stdout, stderr=stderr, cmd=cmd)
    if error:
        module.fail_json(msg="TP group %s: %s" % (_island_text(gpus), error), topology=topology)
    module.exit_json(changed=False, topology=topology,
                     tp_group={"gpus": gpus, "weakest_link": weakest["link"], "weakest_class": weakest["class"]})


if __name__ == "__main__":
    main()
