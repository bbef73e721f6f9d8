"""gpu_facts module: NVML path, nvidia-smi fallback over the real H200 capture, and GPU-less hosts."""

import os

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.modules import gpu_facts

H200_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu", "h200-1gpu-vm")
SMI = "/usr/bin/nvidia-smi"


def _read(name):
    with open(os.path.join(H200_DIR, name)) as handle:
        return handle.read()


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setattr(gpu_facts, "HAS_PYNVML", False)
    monkeypatch.setattr(gpu_facts, "pynvml", None)


def _smi_answers():
    return [
        ([SMI, gpu_facts.query_gpu_command(SMI)[1]], (0, _read("nvidia-smi_query-gpu.csv"), "")),
        ([SMI], (0, _read("nvidia-smi.txt"), "")),
    ]


@pytest.mark.parametrize("check_mode", [False, True])
def test_fallback_to_nvidia_smi(run_module, no_nvml, check_mode):
    result = run_module(gpu_facts.main, {"_ansible_check_mode": check_mode}, _smi_answers(), bins={"nvidia-smi": SMI})
    assert not result.failed
    assert result.result["changed"] is False
    facts = result.result["ansible_facts"]["vllm_cluster_gpus"]
    assert facts["source"] == "nvidia-smi"
    assert facts["gpu_count"] == 1
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["skus"] == ["NVIDIA H200"]
    assert facts["gpus"][0]["memory_total_mib"] == 143771


def test_no_driver_is_zero_gpus_not_a_crash(run_module, no_nvml):
    result = run_module(gpu_facts.main, {})
    facts = result.result["ansible_facts"]["vllm_cluster_gpus"]
    assert not result.failed
    assert facts["gpu_count"] == 0
    assert facts["source"] == "none"
    assert facts["reason"] == "nvidia-ml-py is not installed; no nvidia-smi on PATH"


def test_require_gpus_fails_with_count(run_module, no_nvml):
    result = run_module(gpu_facts.main, {"require_gpus": 8}, _smi_answers(), bins={"nvidia-smi": SMI})
    assert result.failed
    assert result.result["msg"] == "found 1 GPU(s), require_gpus=8 (nvidia-smi)"


def test_forced_nvml_without_binding_fails(run_module, no_nvml):
    result = run_module(gpu_facts.main, {"source": "nvml"})
    assert result.failed
    assert "nvidia-ml-py" in result.result["msg"]


def test_nvidia_smi_error_reports_command(run_module, no_nvml):
    answers = [([SMI], (9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"))]
    result = run_module(gpu_facts.main, {"source": "nvidia-smi"}, answers, bins={"nvidia-smi": SMI})
    assert result.failed
    assert result.result["rc"] == 9
    assert "couldn't communicate" in result.result["stderr"]
    assert result.result["cmd"] == gpu_facts.query_gpu_command(SMI)


def test_garbled_csv_is_a_clear_failure(run_module, no_nvml):
    answers = [([SMI], (0, "0, NVIDIA H200\n", ""))]
    result = run_module(gpu_facts.main, {"source": "nvidia-smi"}, answers, bins={"nvidia-smi": SMI})
    assert result.failed
    assert "has 2 fields, expected 13" in result.result["msg"]


class _FakeNVMLModule:
    """Stand-in for pynvml whose library fails to load, like on a host without the driver."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.shutdowns = 0

    def nvmlInit(self):
        raise self.NVMLError("NVML Shared Library Not Found")


def test_nvml_absent_library_falls_back(run_module, monkeypatch):
    monkeypatch.setattr(gpu_facts, "HAS_PYNVML", True)
    monkeypatch.setattr(gpu_facts, "pynvml", _FakeNVMLModule())
    result = run_module(gpu_facts.main, {}, _smi_answers(), bins={"nvidia-smi": SMI})
    assert result.result["ansible_facts"]["vllm_cluster_gpus"]["source"] == "nvidia-smi"


def test_nvml_absent_library_and_no_smi_names_both_reasons(run_module, monkeypatch):
    monkeypatch.setattr(gpu_facts, "HAS_PYNVML", True)
    monkeypatch.setattr(gpu_facts, "pynvml", _FakeNVMLModule())
    result = run_module(gpu_facts.main, {})
    assert result.result["ansible_facts"]["vllm_cluster_gpus"]["reason"] == \
        "NVML did not initialise: NVML Shared Library Not Found; no nvidia-smi on PATH"
