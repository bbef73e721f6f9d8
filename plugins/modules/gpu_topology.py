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
    link_rank,
    parse_topo_matrix,
    tp_group_fits,
    weakest_link,
)


def _island_text(island):
    return ",".join("GPU%d" % i for i in island)


def _best_link_out_of(topology, island):
    """Strongest link from the island to a GPU outside it: what a bigger TP group would have to cross."""
    matrix = topology["matrix"]
    pairs = [(i, j) for i in island for j in range(topology["gpu_count"]) if j not in island]
    i, j = max(pairs, key=lambda pair: (link_rank(matrix[pair[0]][pair[1]]), -pair[0], -pair[1]))
    return i, j, matrix[i][j]


def _tp_group(topology, tp_size, tp_gpus):
    """Pick the group to check and return ``(gpus, error)``."""
    if tp_gpus:
        gpus = sorted(set(tp_gpus))
        if tp_size and len(gpus) != tp_size:
            return None, "tp_gpus lists %d GPU(s) but require_tp_size=%d" % (len(gpus), tp_size)
        weakest = weakest_link(topology, gpus)
        if tp_size and len(gpus) > 1 and weakest["class"] != "nvlink":
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
    i, j, link = _best_link_out_of(topology, largest)
    return None, ("require_tp_size=%d does not fit inside one NVLink island: the largest island is %s (%d GPU(s)); "
                  "beyond it GPU%d and GPU%d are joined by %s. Lower tensor_parallel_size to %d or add pipeline stages" % (
                      tp_size, _island_text(largest), len(largest), i, j, link, len(largest)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require_tp_size=dict(type="int"),
            require_link=dict(type="str", default="any", choices=["nvlink", "pcie_switch", "any"]),
            tp_gpus=dict(type="list", elements="int"),
        ),
        supports_check_mode=True,
    )
    tp_size = module.params["require_tp_size"]
    if tp_size is not None and tp_size < 1:
        module.fail_json(msg="require_tp_size must be at least 1, got %d" % tp_size)
    nvidia_smi = module.get_bin_path("nvidia-smi", required=True)
    cmd = [nvidia_smi, "topo", "-m"]
    rc, stdout, stderr = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg="nvidia-smi topo -m failed with rc %d" % rc, rc=rc, stdout=stdout, stderr=stderr, cmd=cmd)
    try:
        topology = parse_topo_matrix(stdout)
    except TopologyParseError as exc:
        module.fail_json(msg="cannot parse nvidia-smi topo -m output: %s" % exc, rc=rc, stdout=stdout, stderr=stderr, cmd=cmd)
    # Past parsing, a TopologyParseError is a question the host cannot answer (say, GPU9 on a 2-GPU host).
    try:
        gpus, error = _tp_group(topology, tp_size, module.params["tp_gpus"])
        if not error:
            error = check_link_requirement(topology, gpus, module.params["require_link"])
            if error:
                error = "TP group %s: %s" % (_island_text(gpus), error)
    except TopologyParseError as exc:
        gpus, error = None, str(exc)
    if error:
        module.fail_json(msg=error, topology=topology)
    weakest = weakest_link(topology, gpus)
    module.exit_json(changed=False, topology=topology,
                     tp_group={"gpus": gpus, "weakest_link": weakest["link"], "weakest_class": weakest["class"]})


if __name__ == "__main__":
    main()
