"""The record of the real-H200 run (tests/device/validate_gpu_host.sh) agrees with the parsers.

The modules ran there through the real ansible CLI against the real driver; these tests keep
that evidence honest: the same captures parsed here must give the same answers.
"""

import json
import os

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._gpu_facts import (
    parse_cuda_version,
    parse_query_csv,
    summarize,
)
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._topology import parse_topo_matrix

RECORD_DIR = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gpu", "h200-1gpu-device")


def _read(name):
    with open(os.path.join(RECORD_DIR, name)) as handle:
        return handle.read()


RECORD = json.loads(_read("ansible-results.json"))
MODULES = RECORD["modules"]


def test_every_module_call_ran_as_expected():
    assert {name: entry["status"] for name, entry in MODULES.items()} == {
        "gpu_facts_auto": "SUCCESS", "gpu_facts_nvml": "SUCCESS", "gpu_facts_smi": "SUCCESS",
        "gpu_topology": "SUCCESS", "gpu_topology_all": "SUCCESS", "gpu_topology_too_big": "FAILED!"}
    assert MODULES["gpu_topology_too_big"]["result"]["msg"] == "require_tp_size=2 but this host has 1 GPU(s)"


def test_topology_module_matches_parser_on_the_capture():
    assert MODULES["gpu_topology"]["result"]["topology"] == parse_topo_matrix(_read("nvidia-smi_topo_-m.txt"))


def test_nvidia_smi_facts_match_parser_on_the_capture():
    driver, gpus = parse_query_csv(_read("nvidia-smi_query-gpu.csv"))
    expected = summarize("nvidia-smi", driver, parse_cuda_version(_read("nvidia-smi.txt")), gpus)
    assert MODULES["gpu_facts_smi"]["result"]["ansible_facts"]["vllm_cluster_gpus"] == expected


def test_nvml_and_nvidia_smi_agree_on_the_real_gpu():
    nvml = MODULES["gpu_facts_nvml"]["result"]["ansible_facts"]["vllm_cluster_gpus"]
    smi = MODULES["gpu_facts_smi"]["result"]["ansible_facts"]["vllm_cluster_gpus"]
    assert MODULES["gpu_facts_auto"]["result"]["ansible_facts"]["vllm_cluster_gpus"]["source"] == "nvml"
    assert nvml["source"] == "nvml" and smi["source"] == "nvidia-smi"

    def _comparable(facts):
        # memory.used differs by what NVML itself holds while it reads (615 MiB on the H200).
        gpus = [dict(gpu, memory_used_mib=None) for gpu in facts["gpus"]]
        return dict(facts, source=None, gpus=gpus)
    assert _comparable(nvml) == _comparable(smi)
    assert (nvml["driver_version"], nvml["cuda_driver_version"], nvml["skus"]) == ("580.159.04", "13.0", ["NVIDIA H200"])


def test_preflight_planned_tp1_for_an_8b_model_on_the_h200():
    replica = RECORD["preflight_plan"]["replicas"][0]
    assert (replica["tensor_parallel_size"], replica["pipeline_parallel_size"], replica["backend"]) == (1, 1, "mp")
    assert RECORD["preflight_plan"]["nodes"][0]["source"] == "facts"
    assert RECORD["preflight_plan"]["nodes"][0]["gpu_memory_bytes"] == 143771 * 1024 * 1024
