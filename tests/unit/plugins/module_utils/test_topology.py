"""nvidia-smi topo -m parser over every real capture, plus synthetic shapes and errors."""

import os
import re

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._topology import (
    TopologyParseError,
    check_link_requirement,
    link_class,
    link_rank,
    nvlink_islands,
    parse_topo_matrix,
    tp_group_fits,
    weakest_link,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "gpu")
SHARED_FIXTURES = os.path.join(REPO, "..", "shared", "fixtures", "gpu")


def _full(count, link):
    return [["X" if i == j else link for j in range(count)] for i in range(count)]


def _blocks(inner, inner_link, outer, outer_link, other_link):
    """8x8 matrix: inner_link inside each inner group, outer_link inside each outer group, other_link elsewhere."""
    def link(i, j):
        if i == j:
            return "X"
        if any(i in group and j in group for group in inner):
            return inner_link
        return outer_link if any(i in group and j in group for group in outer) else other_link
    return [[link(i, j) for j in range(8)] for i in range(8)]


def _gpus(affinities):
    return [{"index": i, "name": "GPU%d" % i, "cpu_affinity": cpu, "numa_affinity": numa, "gpu_numa_id": gpu_numa}
            for i, (cpu, numa, gpu_numa) in enumerate(affinities)]


# Expected parse of every topology capture, written by reading each file.
EXPECTED = {
    "h200-1gpu-vm/nvidia-smi_topo_-m.txt": {
        "gpu_count": 1, "matrix": [["X"]], "islands": [[0]], "nics": [],
        "gpus": _gpus([("0-15", "0", None)]),
    },
    "h200-1gpu-device/nvidia-smi_topo_-m.txt": {
        "gpu_count": 1, "matrix": [["X"]], "islands": [[0]], "nics": [],
        "gpus": _gpus([("0-15", "0", None)]),
    },
    "public/01_h100_8gpu_nv18_stas00.txt": {
        "gpu_count": 8, "matrix": _full(8, "NV18"), "islands": [list(range(8))], "nics": [],
        "gpus": _gpus([("0-51", "0", None)] * 4 + [("52-103", "1", None)] * 4),
    },
    "public/02_a100_8gpu_nv12_stas00.txt": {
        "gpu_count": 8, "matrix": _full(8, "NV12"), "islands": [list(range(8))], "nics": [],
        "gpus": _gpus([("0-23", "0", None)] * 4 + [("24-47", "1", None)] * 4),
    },
    "public/03a_2gpu_nv2_stas00.txt": {
        "gpu_count": 2, "matrix": _full(2, "NV2"), "islands": [[0, 1]], "nics": [],
        "gpus": _gpus([("0-23", None, None)] * 2),
    },
    "public/03b_2gpu_phb_stas00.txt": {
        "gpu_count": 2, "matrix": _full(2, "PHB"), "islands": [[0], [1]], "nics": [],
        "gpus": _gpus([("0-11", None, None)] * 2),
    },
    "public/06_pcie_2gpu_phb_2nic_mlx5_stelline.txt": {
        "gpu_count": 2, "matrix": _full(2, "PHB"), "islands": [[0], [1]],
        "gpus": _gpus([("0-23", "0", None)] * 2),
        "nics": [
            {"name": "NIC0", "device": "mlx5_0", "links": {"GPU0": "NODE", "GPU1": "NODE"},
             "nearest_gpus": [0, 1], "nearest_link": "NODE"},
            {"name": "NIC1", "device": "mlx5_1", "links": {"GPU0": "NODE", "GPU1": "NODE"},
             "nearest_gpus": [0, 1], "nearest_link": "NODE"},
        ],
    },
    "public/07_rtxa6000_8gpu_nv4pairs_unige.txt": {
        "gpu_count": 8, "matrix": _blocks([[0, 1], [2, 3], [4, 5], [6, 7]], "NV4", [[0, 1, 2, 3], [4, 5, 6, 7]], "NODE", "SYS"),
        "islands": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "gpus": _gpus([("0-63", "0", None)] * 4 + [("64-127", "1", None)] * 4),
        "nics": [
            {"name": nic, "device": device,
             "links": dict(("GPU%d" % i, link) for i, link in enumerate(["SYS"] * 4 + ["NODE", "NODE", "PHB", "NODE"])),
             "nearest_gpus": [6], "nearest_link": "PHB"} for nic, device in (("NIC0", "mlx5_0"), ("NIC1", "mlx5_1"))
        ],
    },
    "public/08_rtx4090_8gpu_pcie_pix_sys_gooxi.txt": {
        "gpu_count": 8, "matrix": _blocks([[0, 1, 2, 3, 4], [5, 6, 7]], "PIX", [list(range(8))], "SYS", "SYS"),
        "islands": [[i] for i in range(8)],
        "gpus": _gpus([("0-31,64-95", "0", None)] * 5 + [("32-63,96-127", "1", None)] * 3),
        "nics": [
            {"name": nic, "device": device,
             "links": dict(("GPU%d" % i, link) for i, link in enumerate(["SYS"] * 5 + ["NODE"] * 3)),
             "nearest_gpus": [5, 6, 7], "nearest_link": "NODE"} for nic, device in (("NIC0", "mlx5_0"), ("NIC1", "mlx5_1"))
        ],
    },
}


def _topology_captures():
    found = []
    for folder, _dirs, files in os.walk(FIXTURES):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), FIXTURES)
            if name == "nvidia-smi_topo_-m.txt" or rel.startswith("public" + os.sep):
                found.append(rel)
    return sorted(found)


def _read(rel):
    with open(os.path.join(FIXTURES, rel)) as handle:
        return handle.read()


def test_every_capture_has_an_expectation():
    assert _topology_captures() == sorted(EXPECTED)


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_capture_parses_exactly(rel):
    assert parse_topo_matrix(_read(rel)) == EXPECTED[rel]


@pytest.mark.skipif(not os.path.isdir(SHARED_FIXTURES), reason="../shared/fixtures/gpu is not beside this checkout")
def test_repo_fixtures_mirror_shared_ones():
    for folder, _dirs, files in os.walk(SHARED_FIXTURES):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), SHARED_FIXTURES)
            assert _sanity_clean(os.path.join(folder, name)) == _sanity_clean(os.path.join(FIXTURES, rel)), rel


def _sanity_clean(path):
    """A capture's text as the repo keeps it: ansible-test sanity wants "\n" line endings and UTF-8, and a raw vLLM
    log has tqdm's carriage returns ("\r", "\r\n") and lines cut inside a character."""
    with open(path, "rb") as handle:
        return re.sub(rb"\r+\n?", b"\n", handle.read()).decode("utf-8", "replace")


SPACED = """        GPU0    GPU1    GPU2    GPU3    mlx5_0  CPU Affinity    NUMA Affinity
GPU0     X      NV4     SYS     SYS     PIX     0-19,40-59      0
GPU1    NV4      X      SYS     SYS     PXB     0-19,40-59      0
GPU2    SYS     SYS      X      NV4     SYS     20-39,60-79     1
GPU3    SYS     SYS     NV4      X      SYS     20-39,60-79     1
mlx5_0  PIX     PXB     SYS     SYS      X
"""


def test_old_raw_mlx5_headers_and_partial_mesh():
    topo = parse_topo_matrix(SPACED)
    assert topo["islands"] == [[0, 1], [2, 3]]
    assert topo["nics"] == [{"name": "mlx5_0", "device": "mlx5_0",
                             "links": {"GPU0": "PIX", "GPU1": "PXB", "GPU2": "SYS", "GPU3": "SYS"},
                             "nearest_gpus": [0], "nearest_link": "PIX"}]
    assert topo["gpus"][2]["cpu_affinity"] == "20-39,60-79"


def test_tabs_and_spaces_give_the_same_result():
    tabbed = "\n".join("\t".join(line.split()) if not line.startswith(" ") else "\t" + "\t".join(
        ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0", "CPU Affinity", "NUMA Affinity"]) for line in SPACED.splitlines())
    assert parse_topo_matrix(tabbed) == parse_topo_matrix(SPACED)


def test_hybrid_cube_mesh_reports_overlapping_islands():
    # DGX-1 style: 0-1-2-3 fully joined, 0-4 joined, 4-5-6-7 fully joined, SOC (old name of SYS) elsewhere.
    links = {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7), (0, 4)}
    matrix = [["X" if i == j else ("NV1" if (min(i, j), max(i, j)) in links else "SOC") for j in range(8)] for i in range(8)]
    assert nvlink_islands(matrix) == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 4]]
    header = "\t" + "\t".join("GPU%d" % i for i in range(8)) + "\tCPU Affinity"
    text = "\n".join([header] + ["GPU%d\t%s\t0-39" % (i, "\t".join(row)) for i, row in enumerate(matrix)])
    topo = parse_topo_matrix(text)
    assert topo["matrix"] == matrix
    assert topo["gpus"][7] == {"index": 7, "name": "GPU7", "cpu_affinity": "0-39", "numa_affinity": None, "gpu_numa_id": None}


@pytest.mark.parametrize("text, message", [
    ("", "printed nothing"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "no nvidia-smi topo -m header"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\nGPU1\tNV4\n", "row GPU1 has 1 link cells, expected 2"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tQPI\t0-3\nGPU1\tNV4\t X \t0-3\n", "row GPU0: unknown link type 'QPI'"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\n", "matrix lacks rows for GPU1"),
    ("\tGPU0\tGPU1\nGPU0\tNV4\tNV4\nGPU1\tNV4\t X\n", "does not have X on the diagonal"),
    ("\tGPU1\tGPU0\nGPU1\t X\tNV4\nGPU0\tNV4\t X\n", "not GPU0..GPU1 first and in order"),
    ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-3\t0\t7\n", "unexpected trailing cells"),
    ("\tGPU0\nGPU9\t X\n", "row 'GPU9' is not one of the header's devices"),
])
def test_unparseable_text_is_a_clear_error(text, message):
    with pytest.raises(TopologyParseError, match=message):
        parse_topo_matrix(text)


def test_link_rank_and_class_order():
    order = ["X", "NV18", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert sorted(order, key=link_rank, reverse=True) == order
    assert [link_class(link) for link in order] == ["self", "nvlink", "nvlink", "pix", "pxb", "phb", "node", "sys"]
    assert link_class("SOC") == "sys"


def test_weakest_link_inside_a_group():
    topo = parse_topo_matrix(SPACED)
    assert weakest_link(topo, [0, 1]) == {"link": "NV4", "class": "nvlink", "between": [0, 1]}
    assert weakest_link(topo, [0, 1, 2]) == {"link": "SYS", "class": "sys", "between": [0, 2]}
    assert weakest_link(topo, [3]) == {"link": "X", "class": "self", "between": [3, 3]}
    with pytest.raises(TopologyParseError, match=r"GPU index \[4\] out of range"):
        weakest_link(topo, [0, 4])


def test_tp_group_fits():
    topo = parse_topo_matrix(SPACED)
    assert tp_group_fits(topo, 2) == {"fits": True, "island": [0, 1], "largest_island": 2}
    assert tp_group_fits(topo, 4) == {"fits": False, "island": None, "largest_island": 2}
    with pytest.raises(TopologyParseError):
        tp_group_fits(topo, 0)


def test_check_link_requirement():
    topo = parse_topo_matrix(SPACED)
    assert check_link_requirement(topo, [0, 1], "nvlink") is None
    assert check_link_requirement(topo, [0, 1, 2], "nvlink") == "GPU0 and GPU2 are joined by SYS, weaker than the required nvlink"
    pcie = parse_topo_matrix(_read("public/03b_2gpu_phb_stas00.txt"))
    assert check_link_requirement(pcie, [0, 1], "pcie_switch") == "GPU0 and GPU1 are joined by PHB, weaker than the required pcie_switch"
    assert check_link_requirement(pcie, [0, 1], "any") is None
    with pytest.raises(TopologyParseError, match="require_link must be one of"):
        check_link_requirement(pcie, [0, 1], "fast")


def test_junk_mentioning_gpu0_before_the_header_is_skipped():
    junk = "# GPU0 and GPU1 share an NVLink bridge\r\n$ nvidia-smi topo -m\r\n"
    assert parse_topo_matrix(junk + SPACED.replace("\n", "\r\n")) == parse_topo_matrix(SPACED)


NIC_NO_LEGEND_GPU_NUMA = """        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV2     SYS     0-23            0               2
GPU1    NV2      X      PXB     24-47           1               3
NIC0    SYS     PXB      X
"""


def test_nic_without_legend_and_space_separated_gpu_numa_id():
    topo = parse_topo_matrix(NIC_NO_LEGEND_GPU_NUMA)
    assert topo["gpus"] == _gpus([("0-23", "0", "2"), ("24-47", "1", "3")])
    assert topo["islands"] == [[0, 1]]
    assert topo["nics"] == [{"name": "NIC0", "device": None, "links": {"GPU0": "SYS", "GPU1": "PXB"},
                             "nearest_gpus": [1], "nearest_link": "PXB"}]


def test_nvlink_islands_of_synthetic_matrices():
    assert nvlink_islands([]) == []
    assert nvlink_islands([["X"]]) == [[0]]
    # 0-1 and 2-3 bonded, 1-2 only over SYS: two islands, never one.
    partial = [["X", "NV2", "SYS", "SYS"], ["NV2", "X", "SYS", "SYS"], ["SYS", "SYS", "X", "NV2"], ["SYS", "SYS", "NV2", "X"]]
    assert nvlink_islands(partial) == [[0, 1], [2, 3]]
    # A chain 0-1-2 without 0-2 is two overlapping pairs, not a 3-GPU island.
    chain = [["X", "NV1", "PHB"], ["NV1", "X", "NV1"], ["PHB", "NV1", "X"]]
    assert nvlink_islands(chain) == [[0, 1], [1, 2]]
