# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse ``nvidia-smi topo -m`` and answer the questions parallelism planning asks of it.

Pure functions. The matrix comes in many shapes (tabs or spaces, ANSI codes in the header,
NIC columns named NICn with a legend or raw mlx5_n, one to three affinity columns); all of
them reduce to whitespace tokens because no cell ever contains a space.
"""

from __future__ import annotations

import re

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_RE = re.compile(r"^GPU(\d+)$")
_NV_RE = re.compile(r"^NV(\d+)$")
_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# Affinity columns in the order nvidia-smi prints them; multi-word names, matched on the header's tail.
_AFFINITY_COLUMNS = (("cpu_affinity", "CPU Affinity"), ("numa_affinity", "NUMA Affinity"), ("gpu_numa_id", "GPU NUMA ID"))
# Larger is stronger. NV# ranks above every PCIe path; more bonded links rank higher.
_PCIE_RANK = {"PIX": 5, "PXB": 4, "PHB": 3, "NODE": 2, "SYS": 1, "SOC": 1}
_CLASS = {"PIX": "pix", "PXB": "pxb", "PHB": "phb", "NODE": "node", "SYS": "sys", "SOC": "sys"}
REQUIRE_LINK_MIN_RANK = {"nvlink": 100, "pcie_switch": _PCIE_RANK["PXB"], "any": 0}


class TopologyParseError(ValueError):
    """The text is not a ``nvidia-smi topo -m`` matrix, or a question about it makes no sense."""


def link_rank(link):
    """Rank a link token; larger is stronger (NV18 > NV2 > PIX > PXB > PHB > NODE > SYS)."""
    if link == "X":
        return 1000
    match = _NV_RE.match(link)
    if match:
        return 100 + int(match.group(1))
    if link in _PCIE_RANK:
        return _PCIE_RANK[link]
    raise TopologyParseError("unknown link type %r (expected X, NV#, PIX, PXB, PHB, NODE or SYS)" % (link,))


def link_class(link):
    """Class of a link token: nvlink, pix, pxb, phb, node, sys or self."""
    if link == "X":
        return "self"
    if _NV_RE.match(link):
        return "nvlink"
    link_rank(link)
    return _CLASS[link]


def _snippet(lines, limit=3):
    return " | ".join(line.strip() for line in lines[:limit] if line.strip())[:200]


def _find_header(lines):
    # GPUs always come first, so the header starts with GPU0; preferring that (and no X, which
    # only rows have) keeps a comment or prompt line that merely mentions GPU0 from matching.
    # The looser second pass lets _parse_header explain a header with its GPUs out of order.
    for strict in (True, False):
        for index, line in enumerate(lines):
            tokens = line.split()
            if "GPU0" in tokens and "X" not in tokens and (tokens[0] == "GPU0" or not strict):
                return index
    raise TopologyParseError("no nvidia-smi topo -m header (a line starting with a GPU0 column) found in: %r" % _snippet(lines))


def _parse_header(line):
    """Return (device column names, affinity keys present)."""
    tokens = line.split()
    devices = []
    for token in tokens:
        if token in ("CPU", "NUMA", "GPU"):  # first word of an affinity column title
            break
        devices.append(token)
    tail = " ".join(tokens[len(devices):])
    affinity = [key for key, title in _AFFINITY_COLUMNS if title in tail]
    gpus = [name for name in devices if _GPU_RE.match(name)]
    if not gpus:
        raise TopologyParseError("header has no GPU columns: %r" % line.strip())
    expected = ["GPU%d" % i for i in range(len(gpus))]
    if gpus != expected or devices[:len(gpus)] != gpus:
        raise TopologyParseError("header GPU columns %s are not GPU0..GPU%d first and in order" % (gpus, len(gpus) - 1))
    return devices, affinity


def _parse_legend(lines):
    legend = {}
    for line in lines:
        match = _LEGEND_RE.match(line)
        if match:
            legend[match.group(1)] = match.group(2)
    return legend


def _none_if_na(value):
    return None if value in (None, "N/A") else value


def parse_topo_matrix(text):
    """Parse ``nvidia-smi topo -m`` output.

    Returns ``gpu_count``, ``gpus`` (index, name, cpu_affinity, numa_affinity, gpu_numa_id),
    ``matrix`` (GPU x GPU link tokens), ``islands`` (maximal NVLink cliques) and ``nics``
    (name, device, links to each GPU, nearest GPUs and that link). Raises TopologyParseError
    rather than ever returning an empty or partial result.
    """
    if not text or not text.strip():
        raise TopologyParseError("nvidia-smi topo -m printed nothing")
    lines = _ANSI_RE.sub("", text).replace("\r", "").splitlines()
    start = _find_header(lines)
    devices, affinity = _parse_header(lines[start])
    gpu_count = sum(1 for name in devices if _GPU_RE.match(name))

    rows = {}
    for line in lines[start + 1:]:
        tokens = line.split()
        if not tokens or tokens[0].rstrip(":") == "Legend":
            break
        name, cells = tokens[0], tokens[1:]
        if name not in devices:
            raise TopologyParseError("row %r is not one of the header's devices %s" % (name, devices))
        links, extra = cells[:len(devices)], cells[len(devices):]
        if len(links) != len(devices):
            raise TopologyParseError("row %s has %d link cells, expected %d: %r" % (name, len(links), len(devices), line.strip()))
        for link in links:
            try:
                link_rank(link)
            except TopologyParseError as exc:
                raise TopologyParseError("row %s: %s in %r" % (name, exc, line.strip()))
        if links[devices.index(name)] != "X":
            raise TopologyParseError("row %s does not have X on the diagonal: %r" % (name, line.strip()))
        if len(extra) > len(affinity):
            raise TopologyParseError("row %s has unexpected trailing cells %s" % (name, extra))
        rows[name] = (links, extra)

    missing = [name for name in devices if name not in rows]
    if missing:
        raise TopologyParseError("matrix lacks rows for %s" % ", ".join(missing))

    gpus, matrix = [], []
    for index in range(gpu_count):
        links, extra = rows["GPU%d" % index]
        matrix.append(links[:gpu_count])
        gpu = {"index": index, "name": "GPU%d" % index, "cpu_affinity": None, "numa_affinity": None, "gpu_numa_id": None}
        for key, value in zip(affinity, extra):
            gpu[key] = _none_if_na(value)
        gpus.append(gpu)

    legend = _parse_legend(lines[start:])
    nics = []
    for column, name in enumerate(devices):
        if _GPU_RE.match(name):
            continue
        links = {"GPU%d" % i: rows["GPU%d" % i][0][column] for i in range(gpu_count)}
        best = max(link_rank(link) for link in links.values())
        nearest = [i for i in range(gpu_count) if link_rank(links["GPU%d" % i]) == best]
        nics.append({
            "name": name,
            "device": legend.get(name, None if name.startswith("NIC") else name),
            "links": links,
            "nearest_gpus": nearest,
            "nearest_link": links["GPU%d" % nearest[0]],
        })

    return {"gpu_count": gpu_count, "gpus": gpus, "matrix": matrix, "islands": nvlink_islands(matrix), "nics": nics}


def nvlink_islands(matrix):
    """Maximal groups of GPUs joined pairwise by NVLink (maximal cliques; singletons for GPUs without NVLink)."""
    count = len(matrix)
    if not count:
        return []
    neighbours = [{j for j in range(count) if j != i and _NV_RE.match(matrix[i][j])} for i in range(count)]
    cliques = []

    def expand(clique, candidates, excluded):
        # Bron-Kerbosch with pivoting; overlapping cliques (hybrid cube-mesh) are all reported.
        if not candidates and not excluded:
            cliques.append(sorted(clique))
            return
        pivot = max(candidates | excluded, key=lambda v: len(neighbours[v] & candidates))
        for vertex in sorted(candidates - neighbours[pivot]):
            expand(clique | {vertex}, candidates & neighbours[vertex], excluded & neighbours[vertex])
            candidates = candidates - {vertex}
            excluded = excluded | {vertex}

    expand(set(), set(range(count)), set())
    return sorted(cliques, key=lambda island: (-len(island), island[0]))


def _matrix_of(topology_or_matrix):
    return topology_or_matrix["matrix"] if isinstance(topology_or_matrix, dict) else topology_or_matrix


def _check_indices(matrix, gpu_indices):
    if not gpu_indices:
        raise TopologyParseError("no GPUs given")
    bad = [i for i in gpu_indices if not isinstance(i, int) or i < 0 or i >= len(matrix)]
    if bad:
        raise TopologyParseError("GPU index %s out of range: this host has GPU0..GPU%d" % (bad, len(matrix) - 1))


def weakest_link(topology_or_matrix, gpu_indices):
    """The weakest link inside a proposed TP group: ``{"link", "class", "between"}``."""
    matrix = _matrix_of(topology_or_matrix)
    _check_indices(matrix, gpu_indices)
    group = sorted(set(gpu_indices))
    if len(group) == 1:
        return {"link": "X", "class": "self", "between": [group[0], group[0]]}
    pairs = [(i, j) for pos, i in enumerate(group) for j in group[pos + 1:]]
    i, j = min(pairs, key=lambda pair: (link_rank(matrix[pair[0]][pair[1]]), pair))
    return {"link": matrix[i][j], "class": link_class(matrix[i][j]), "between": [i, j]}


def tp_group_fits(topology, tp_size):
    """Whether tp_size GPUs fit inside one NVLink island: ``{"fits", "island", "largest_island"}``."""
    if not isinstance(tp_size, int) or tp_size < 1:
        raise TopologyParseError("tp_size must be a positive integer, got %r" % (tp_size,))
    islands = topology["islands"]
    largest = max((len(island) for island in islands), default=0)
    for island in islands:
        if len(island) >= tp_size:
            return {"fits": True, "island": island, "largest_island": largest}
    return {"fits": False, "island": None, "largest_island": largest}


def check_link_requirement(topology, gpu_indices, require_link):
    """None when every pair in the group meets require_link (nvlink, pcie_switch, any), else a message."""
    if require_link not in REQUIRE_LINK_MIN_RANK:
        raise TopologyParseError("require_link must be one of %s, got %r" % (sorted(REQUIRE_LINK_MIN_RANK), require_link))
    weakest = weakest_link(topology, gpu_indices)
    if weakest["link"] == "X" or link_rank(weakest["link"]) >= REQUIRE_LINK_MIN_RANK[require_link]:
        return None
    i, j = weakest["between"]
    return "GPU%d and GPU%d are joined by %s, weaker than the required %s" % (i, j, weakest["link"], require_link)
