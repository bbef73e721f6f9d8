"""Parser and NVML normalisation tests for _gpu_facts, over the real H200 capture."""

import os

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _gpu_facts as gf

H200_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu", "h200-1gpu-vm")

H200_GPU = {
    "index": 0,
    "name": "NVIDIA H200",
    "uuid": "GPU-610d5b85-56af-75c3-d325-d948d8316c99",
    "pci_bus_id": "00000000:00:06.0",
    "memory_total_mib": 143771,
    "memory_used_mib": 0,
    "compute_capability": "9.0",
    "mig_mode": "disabled",
    "persistence_mode": True,
    "power_limit_w": 700.0,
    "ecc_mode": "enabled",
    "max_sm_clock_mhz": 1980,
}


def _read(name):
    with open(os.path.join(H200_DIR, name)) as handle:
        return handle.read()


def test_query_command_lists_every_field_once():
    cmd = gf.query_gpu_command("/usr/bin/nvidia-smi")
    assert cmd[0] == "/usr/bin/nvidia-smi"
    assert cmd[1] == "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,driver_version,compute_cap," \
        "mig.mode.current,persistence_mode,power.limit,ecc.mode.current,clocks.max.sm"
    assert cmd[2] == "--format=csv,noheader,nounits"


def test_parse_real_h200_csv():
    driver, gpus = gf.parse_query_csv(_read("nvidia-smi_query-gpu.csv"))
    assert driver == "580.159.04"
    assert gpus == [H200_GPU]


def test_cuda_version_from_real_banner():
    assert gf.parse_cuda_version(_read("nvidia-smi.txt")) == "13.0"
    assert gf.parse_cuda_version("no banner here") is None


def test_empty_csv_means_no_gpu():
    assert gf.parse_query_csv("\n") == (None, [])


def test_not_supported_cells_become_none():
    line = "1, Tesla T4, GPU-x, 00000000:3B:00.0, 15360, 3, 535.1, 7.5, [N/A], Disabled, [Not Supported], N/A, 1590\n"
    _driver, gpus = gf.parse_query_csv(line)
    assert gpus[0]["mig_mode"] == "n/a"
    assert gpus[0]["power_limit_w"] is None
    assert gpus[0]["ecc_mode"] == "n/a"
    assert gpus[0]["persistence_mode"] is False


@pytest.mark.parametrize("text, message", [
    ("0, NVIDIA H200, GPU-x\n", "has 3 fields, expected 13"),
    ("x, NVIDIA H200, GPU-x, 0:6.0, 143771, 0, 580, 9.0, Disabled, Enabled, 700, Enabled, 1980\n", "field index"),
    ("0, A, GPU-x, 0:6.0, 1, 0, 580, 9.0, Maybe, Enabled, 700, Enabled, 1980\n", "unexpected mode value 'Maybe'"),
    ("0, A, GPU-a, 0:6.0, 1, 0, 580.1, 9.0, Disabled, Enabled, 700, Enabled, 1980\n"
     "1, A, GPU-b, 0:7.0, 1, 0, 575.2, 9.0, Disabled, Enabled, 700, Enabled, 1980\n", "different driver versions: 575.2, 580.1"),
])
def test_bad_csv_is_a_clear_error(text, message):
    with pytest.raises(gf.GpuFactsError, match=message):
        gf.parse_query_csv(text)


def test_cuda_version_int():
    assert gf.cuda_version_from_int(13000) == "13.0"
    assert gf.cuda_version_from_int(12080) == "12.8"


class FakeNVML:
    """Stand-in for the pynvml binding: one MIG-less GPU like the real H200, one T4 without MIG support."""

    NVML_CLOCK_SM = 1
    NVML_ERROR_NOT_SUPPORTED = 3

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__("error %d" % value)
            self.value = value

    class _Mem:
        def __init__(self, total, used):
            self.total, self.used = total, used

    class _Pci:
        def __init__(self, bus):
            self.busId = bus

    DEVICES = [
        dict(name=b"NVIDIA H200", uuid="GPU-610d5b85-56af-75c3-d325-d948d8316c99", bus="00000000:00:06.0",
             mem=(143771 * 1024 * 1024, 0), mig=(0, 0), ecc=(1, 1), power=700000, persist=1, cc=(9, 0), sm=1980),
        dict(name="Tesla T4", uuid="GPU-t4", bus="00000000:3B:00.0",
             mem=(15360 * 1024 * 1024, 5 * 1024 * 1024), mig=None, ecc=None, power=70000, persist=0, cc=(7, 5), sm=1590),
    ]

    def _dev(self, handle):
        return self.DEVICES[handle]

    def _maybe(self, value):
        if value is None:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return len(self.DEVICES)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._Mem(*self._dev(handle)["mem"])

    def nvmlDeviceGetMigMode(self, handle):
        return self._maybe(self._dev(handle)["mig"])

    def nvmlDeviceGetEccMode(self, handle):
        return self._maybe(self._dev(handle)["ecc"])

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._dev(handle)["power"]

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._dev(handle)["persist"]

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._dev(handle)["cc"]

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        assert clock == self.NVML_CLOCK_SM
        return self._dev(handle)["sm"]

    def nvmlDeviceGetName(self, handle):
        return self._dev(handle)["name"]

    def nvmlDeviceGetUUID(self, handle):
        return self._dev(handle)["uuid"]

    def nvmlDeviceGetPciInfo(self, handle):
        return self._Pci(self._dev(handle)["bus"])


def test_nvml_matches_csv_shape_and_handles_not_supported():
    driver, cuda, gpus = gf.collect_nvml(FakeNVML())
    assert (driver, cuda) == ("580.159.04", "13.0")
    assert gpus[0] == H200_GPU
    assert gpus[1]["mig_mode"] == "n/a"
    assert gpus[1]["ecc_mode"] == "n/a"
    assert gpus[1]["memory_used_mib"] == 5
    assert gpus[1]["compute_capability"] == "7.5"


def test_nvml_errors_other_than_not_supported_propagate():
    nvml = FakeNVML()
    nvml.DEVICES = [dict(FakeNVML.DEVICES[0], mig=None)]

    def broken(handle):
        raise nvml.NVMLError(999)
    nvml.nvmlDeviceGetEccMode = broken
    with pytest.raises(FakeNVML.NVMLError):
        gf.collect_nvml(nvml)


def test_summarize_rolls_up():
    second = dict(H200_GPU, index=1, mig_mode="enabled")
    facts = gf.summarize("nvml", "580.159.04", "13.0", [second, H200_GPU])
    assert facts["gpu_count"] == 2
    assert [gpu["index"] for gpu in facts["gpus"]] == [0, 1]
    assert facts["skus"] == ["NVIDIA H200"]
    assert facts["memory_total_mib"] == 2 * 143771
    assert facts["mig_enabled"] is True
    assert gf.summarize("none", None, None, [], reason="no driver")["gpu_count"] == 0
