"""HARDWARE STAND-IN fixtures for bad-input cases: nvidia-smi captures for GPU layouts the simulated hosts
cannot have (several GPUs, NVLink pairs, MIG, another SKU). Each is the real one-H200 capture
(tests/fixtures/gpu/h200-1gpu-device) with its query rows repeated and a `topo -m` matrix written in the
format of the real captures; nvidia-smi-replay serves them through a wrapper placed first on PATH."""

import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CAPTURE = os.path.join(REPO, "tests", "fixtures", "gpu", "h200-1gpu-device")
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def _read(name):
    with open(os.path.join(CAPTURE, name)) as handle:
        return handle.read()


def query_rows(count, name=None, memory_mib=None, mig=None):
    """The captured --query-gpu row repeated for ``count`` GPUs, with index, UUID and bus id made unique."""
    cells = [cell.strip() for cell in _read("nvidia-smi_query-gpu.csv").strip().split(",")]
    rows = []
    for index in range(count):
        row = list(cells)
        row[0] = str(index)
        row[2] = row[2][:-2] + "%02d" % index
        row[3] = "00000000:%02X:00.0" % (0x18 + index)
        if name:
            row[1] = name
        if memory_mib:
            row[4] = str(memory_mib)
        if mig:
            row[8] = mig
        rows.append(", ".join(row))
    return "\n".join(rows) + "\n"


def topo_matrix(count, link):
    """``link(i, j)`` names the connection between GPU i and GPU j (NV4, SYS, ...)."""
    names = ["GPU%d" % index for index in range(count)]
    lines = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i in range(count):
        cells = [" X " if i == j else link(i, j) for j in range(count)]
        lines.append("\t".join([names[i]] + cells + ["0-15", "0", "", "N/A"]))
    return "\n".join(lines) + "\n" + LEGEND


def fixture(count=1, link=lambda i, j: "SYS", **row):
    """File name -> content of one stand-in capture directory."""
    return {
        "nvidia-smi.txt": _read("nvidia-smi.txt"),
        "nvidia-smi_query-gpu.csv": query_rows(count, **row),
        "nvidia-smi_topo_-m.txt": topo_matrix(count, link),
    }


def nvlink_pairs(i, j):
    """Two NVLink bridges: GPUs 0-1 and 2-3 are paired, everything else crosses the CPU."""
    return "NV4" if i // 2 == j // 2 else "SYS"
