"""gpu_topology module over real captures: normal, check mode, TP/link requirements and failures."""

import os

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.modules import gpu_topology

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu")
SMI = "/usr/bin/nvidia-smi"


def _capture(rel):
    with open(os.path.join(FIXTURES, rel)) as handle:
        return handle.read()


NV18 = _capture("public/01_h100_8gpu_nv18_stas00.txt")
PHB = _capture("public/03b_2gpu_phb_stas00.txt")


def _run(run_module, args, stdout, rc=0, stderr=""):
    return run_module(gpu_topology.main, args, [([SMI, "topo", "-m"], (rc, stdout, stderr))], bins={"nvidia-smi": SMI})


@pytest.mark.parametrize("check_mode", [False, True])
def test_nvswitch_host_fits_tp8(run_module, check_mode):
    result = _run(run_module, {"require_tp_size": 8, "require_link": "nvlink", "_ansible_check_mode": check_mode}, NV18)
    assert not result.failed, result.result
    assert result.result["changed"] is False
    assert result.result["topology"]["islands"] == [list(range(8))]
    assert result.result["tp_group"] == {"gpus": list(range(8)), "weakest_link": "NV18", "weakest_class": "nvlink"}
    assert result.calls == [[SMI, "topo", "-m"]]


def test_tp2_across_pcie_is_refused_with_gpus_and_link(run_module):
    result = _run(run_module, {"require_tp_size": 2}, PHB)
    assert result.failed
    assert result.result["msg"] == (
        "require_tp_size=2 does not fit inside one NVLink island: the largest island is GPU0 (1 GPU(s)); "
        "beyond it GPU0 and GPU1 are joined by PHB. Lower tensor_parallel_size to 1 or add pipeline stages")
    assert result.result["topology"]["islands"] == [[0], [1]]


# Two NVLink pairs; the pairs meet over PHB at best (GPU1-GPU2) and SYS elsewhere.
PAIRS = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV4\tSYS\tSYS\t0-15\t0
GPU1\tNV4\t X \tPHB\tSYS\t0-15\t0
GPU2\tSYS\tPHB\t X \tNV4\t16-31\t1
GPU3\tSYS\tSYS\tNV4\t X \t16-31\t1
"""


def test_tp_beyond_an_island_names_the_island_and_the_link_out_of_it(run_module):
    result = _run(run_module, {"require_tp_size": 4}, PAIRS)
    assert result.result["msg"] == (
        "require_tp_size=4 does not fit inside one NVLink island: the largest island is GPU0,GPU1 (2 GPU(s)); "
        "beyond it GPU1 and GPU2 are joined by PHB. Lower tensor_parallel_size to 2 or add pipeline stages")
    ok = _run(run_module, {"require_tp_size": 2, "require_link": "nvlink"}, PAIRS)
    assert ok.result["tp_group"] == {"gpus": [0, 1], "weakest_link": "NV4", "weakest_class": "nvlink"}


def test_require_link_nvlink_on_phb(run_module):
    result = _run(run_module, {"require_link": "nvlink"}, PHB)
    assert result.failed
    assert result.result["msg"] == "TP group GPU0,GPU1: GPU0 and GPU1 are joined by PHB, weaker than the required nvlink"
    assert result.result["topology"]["matrix"] == [["X", "PHB"], ["PHB", "X"]]


def test_require_link_nvlink_over_explicit_gpus_across_islands(run_module):
    result = _run(run_module, {"tp_gpus": [1, 2], "require_link": "nvlink"}, PAIRS)
    assert result.result["msg"] == "TP group GPU1,GPU2: GPU1 and GPU2 are joined by PHB, weaker than the required nvlink"
    switch = _run(run_module, {"tp_gpus": [1, 2], "require_link": "pcie_switch"}, PAIRS)
    assert switch.result["msg"] == "TP group GPU1,GPU2: GPU1 and GPU2 are joined by PHB, weaker than the required pcie_switch"
    anything = _run(run_module, {"tp_gpus": [0, 3]}, PAIRS)
    assert anything.result["tp_group"] == {"gpus": [0, 3], "weakest_link": "SYS", "weakest_class": "sys"}


def test_require_tp_size_must_be_positive(run_module):
    result = run_module(gpu_topology.main, {"require_tp_size": 0}, bins={"nvidia-smi": SMI})
    assert result.result["msg"] == "require_tp_size must be at least 1, got 0"


def test_tp_larger_than_host(run_module):
    result = _run(run_module, {"require_tp_size": 16}, NV18)
    assert result.result["msg"] == "require_tp_size=16 but this host has 8 GPU(s)"


def test_require_link_over_all_gpus(run_module):
    result = _run(run_module, {"require_link": "pcie_switch"}, PHB)
    assert result.failed
    assert result.result["msg"] == "TP group GPU0,GPU1: GPU0 and GPU1 are joined by PHB, weaker than the required pcie_switch"


def test_explicit_tp_gpus(run_module):
    ok = _run(run_module, {"tp_gpus": [4, 5, 6, 7], "require_tp_size": 4, "require_link": "nvlink"}, NV18)
    assert ok.result["tp_group"]["gpus"] == [4, 5, 6, 7]
    wrong_size = _run(run_module, {"tp_gpus": [0, 1], "require_tp_size": 4}, NV18)
    assert wrong_size.result["msg"] == "tp_gpus lists 2 GPU(s) but require_tp_size=4"
    across = _run(run_module, {"tp_gpus": [0, 1], "require_tp_size": 2}, PHB)
    assert across.result["msg"] == "tp_gpus GPU0,GPU1 are not inside one NVLink island: GPU0 and GPU1 are joined by PHB"
    out_of_range = _run(run_module, {"tp_gpus": [0, 9]}, PHB)
    assert out_of_range.result["msg"] == "GPU index [9] out of range: this host has GPU0..GPU1"


def test_nvidia_smi_failure_reports_rc_and_cmd(run_module):
    result = _run(run_module, {}, "", rc=255, stderr="NVIDIA-SMI has failed")
    assert result.failed
    assert (result.result["rc"], result.result["stderr"], result.result["cmd"]) == (255, "NVIDIA-SMI has failed", [SMI, "topo", "-m"])
    assert result.result["msg"] == "nvidia-smi topo -m failed with rc 255"


def test_unparseable_output(run_module):
    result = _run(run_module, {}, "No devices were found\n")
    assert result.failed
    assert result.result["msg"] == ("cannot parse nvidia-smi topo -m output: no nvidia-smi topo -m header "
                                    "(a line starting with a GPU0 column) found in: 'No devices were found'")
    assert result.result["stdout"] == "No devices were found\n"


def test_unknown_link_token_is_a_parse_failure(run_module):
    result = _run(run_module, {}, PAIRS.replace("PHB", "QPI"))
    assert result.failed
    assert result.result["msg"].startswith("cannot parse nvidia-smi topo -m output: row GPU1: unknown link type 'QPI'")


def test_missing_binary(run_module):
    result = run_module(gpu_topology.main, {}, bins={})
    assert result.failed
    assert "nvidia-smi" in result.result["msg"]
