#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU facts through NVML or nvidia-smi
version_added: 0.1.0
description:
  - Reads the driver version, the CUDA driver API version and, per GPU, the name, UUID, PCI bus id,
    memory, MIG mode, persistence mode, power limit, ECC mode and compute capability.
  - Uses NVML through C(nvidia-ml-py) when it is importable and the driver library loads, otherwise
    falls back to C(nvidia-smi --query-gpu ... --format=csv,noheader,nounits).
  - A host without an NVIDIA driver is not an error; it reports C(gpu_count=0) and the reason, so CPU
    hosts and simulated clusters can be handled by the same plays.
  - Sets the fact C(vllm_cluster_gpus).
author:
  - llmserve maintainers (@llmserve)
options:
  source:
    description:
      - Where to read facts from.
      - V(auto) tries NVML first, then C(nvidia-smi), then reports no GPU.
      - V(nvml) and V(nvidia-smi) force one source and fail when it is unavailable.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  require_gpus:
    description:
      - Fail unless at least this many GPUs are found.
    type: int
    default: 0
extends_documentation_fragment:
  - llmserve.vllm_cluster.read_only
attributes:
  facts:
    support: full
    description: Sets C(vllm_cluster_gpus).
notes:
  - Requires C(nvidia-ml-py) on the managed host for the NVML path.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  llmserve.vllm_cluster.gpu_facts:

- name: Insist on eight GPUs read through NVML
  llmserve.vllm_cluster.gpu_facts:
    source: nvml
    require_gpus: 8

- name: Show the GPU models
  ansible.builtin.debug:
    msg: "{{ ansible_facts['vllm_cluster_gpus']['skus'] }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    vllm_cluster_gpus:
      description: GPU inventory of the host.
      returned: always
      type: dict
      contains:
        source:
          description: Where the facts came from, V(nvml), V(nvidia-smi) or V(none).
          type: str
          sample: nvml
        gpu_count:
          description: Number of GPUs found.
          type: int
          sample: 8
        driver_version:
          description: NVIDIA driver version, null without a driver.
          type: str
          sample: "580.159.04"
        cuda_driver_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "13.0"
        skus:
          description: Distinct GPU product names.
          type: list
          elements: str
          sample: ["NVIDIA H200"]
        memory_total_mib:
          description: Sum of GPU memory in MiB.
          type: int
          sample: 143771
        mig_enabled:
          description: Whether any GPU has MIG mode enabled.
          type: bool
          sample: false
        reason:
          description: Why no GPU was found, when none was.
          type: str
          sample: "no NVML library and no nvidia-smi on PATH"
        gpus:
          description: One entry per GPU, sorted by index.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA H200
              uuid: GPU-610d5b85-56af-75c3-d325-d948d8316c99
              pci_bus_id: "00000000:00:06.0"
              memory_total_mib: 143771
              memory_used_mib: 0
              compute_capability: "9.0"
              mig_mode: disabled
              persistence_mode: true
              power_limit_w: 700.0
              ecc_mode: enabled
              max_sm_clock_mhz: 1980
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._gpu_facts import (
    GpuFactsError,
    collect_nvml,
    parse_cuda_version,
    parse_query_csv,
    query_gpu_command,
    summarize,
)

try:
    import pynvml
    HAS_PYNVML = True
except ImportError:
    pynvml = None
    HAS_PYNVML = False


def _from_nvml():
    """Return facts from NVML, or None when the driver library is absent."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, "NVML did not initialise: %s" % exc
    try:
        driver, cuda, gpus = collect_nvml(pynvml)
    except pynvml.NVMLError as exc:
        # NVML loaded but a query failed: a broken driver, not an absent one.
        raise GpuFactsError("NVML query failed: %s" % exc)
    finally:
        pynvml.nvmlShutdown()
    return summarize("nvml", driver, cuda, gpus), None


def _run(module, cmd):
    rc, stdout, stderr = module.run_command(cmd)
    if rc != 0:
        module.fail_json(msg="%s failed" % " ".join(cmd[:2]), rc=rc, stdout=stdout, stderr=stderr, cmd=cmd)
    return stdout


def _from_nvidia_smi(module, nvidia_smi):
    cmd = query_gpu_command(nvidia_smi)
    stdout = _run(module, cmd)
    try:
        driver, gpus = parse_query_csv(stdout)
    except GpuFactsError as exc:
        module.fail_json(msg=str(exc), rc=0, stdout=stdout, stderr="", cmd=cmd)
    cuda = parse_cuda_version(_run(module, [nvidia_smi]))
    return summarize("nvidia-smi", driver, cuda, gpus)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", default="auto", choices=["auto", "nvml", "nvidia-smi"]),
            require_gpus=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    source = module.params["source"]
    facts = None
    reasons = []

    if source in ("auto", "nvml"):
        if HAS_PYNVML:
            try:
                facts, why = _from_nvml()
            except GpuFactsError as exc:
                module.fail_json(msg=str(exc))
            if why:
                reasons.append(why)
        elif source == "nvml":
            module.fail_json(msg=missing_required_lib("nvidia-ml-py"))
        else:
            reasons.append("nvidia-ml-py is not installed")
        if facts is None and source == "nvml":
            module.fail_json(msg="source=nvml was requested but " + "; ".join(reasons))

    if facts is None and source in ("auto", "nvidia-smi"):
        nvidia_smi = module.get_bin_path("nvidia-smi", required=source == "nvidia-smi")
        if nvidia_smi:
            facts = _from_nvidia_smi(module, nvidia_smi)
        else:
            reasons.append("no nvidia-smi on PATH")

    if facts is None:
        facts = summarize("none", None, None, [], reason="; ".join(reasons))

    if facts["gpu_count"] < module.params["require_gpus"]:
        module.fail_json(
            msg="found %d GPU(s), require_gpus=%d (%s)" % (
                facts["gpu_count"], module.params["require_gpus"], facts["reason"] or facts["source"]),
            ansible_facts={"vllm_cluster_gpus": facts},
        )
    module.exit_json(changed=False, ansible_facts={"vllm_cluster_gpus": facts})


if __name__ == "__main__":
    main()
