# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPUs and which port each replica owns on each of its hosts.

Pure functions over the planner's nodes (``gpu_count``, optional ``islands``) and the replica layout
(already checked for shape by _cluster.check_replica_layout). A TP group stays inside one NVLink
island; a pipeline stage is one TP group; no GPU serves two replicas. Explicit ``gpus`` are honoured
first, the rest are packed best-fit so small groups do not break up the islands large ones need.
"""

from __future__ import annotations

import re

DEFAULT_PORT = 8000
# What NVML and nvidia-smi print for a GPU or MIG device; anything else never reaches a unit file.
_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


def stages_on_host(replica):
    """TP groups a replica places on each of its hosts: all its PP stages on one host, else one per host."""
    return replica["pipeline_parallel_size"] if len(replica["hosts"]) == 1 else 1


def _label(index, replica):
    return "vllm_cluster_replicas[%d] (%s)" % (index, replica["name"])


def _link_groups(node):
    """Islands that bound a TP group; without NVLink (or without topology) the whole node is one group."""
    islands = node.get("islands") or []
    if any(len(island) > 1 for island in islands):
        covered = set(gpu for island in islands for gpu in island)
        return [sorted(island) for island in islands] + [[gpu] for gpu in range(node["gpu_count"]) if gpu not in covered]
    return [list(range(node["gpu_count"]))]


def _island_of(groups, gpu):
    return next((index for index, group in enumerate(groups) if gpu in group), None)


def _explicit(replica, host):
    """The replica's ``gpus`` for this host: a list (the same on every host) or a dict host -> list."""
    gpus = replica.get("gpus")
    if isinstance(gpus, dict):
        return gpus.get(host)
    return gpus


def _check_explicit(index, replica, host, node, gpus, groups):
    label = "%s.gpus" % _label(index, replica)
    tp = replica["tensor_parallel_size"]
    want = tp * stages_on_host(replica)
    if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
        return ["%s on %s must be a list of GPU indices (or a dict of host to such a list), got %r" % (label, host, gpus)]
    errors = []
    if len(gpus) != want:
        errors.append("%s on %s lists %d GPU(s) but the replica runs %d there (tensor_parallel_size x the pipeline stages "
                      "on that host); list exactly %d" % (label, host, len(gpus), want, want))
    outside = [g for g in gpus if not 0 <= g < node["gpu_count"]]
    if outside:
        errors.append("%s on %s names GPU(s) %s but the host has GPUs 0-%d" % (
            label, host, ", ".join(map(str, outside)), node["gpu_count"] - 1))
    if len(set(gpus)) != len(gpus):
        errors.append("%s on %s lists a GPU twice: %s" % (label, host, gpus))
    if errors or len(groups) == 1:
        return errors
    for stage in range(len(gpus) // tp):
        group = gpus[stage * tp:(stage + 1) * tp]
        if len(set(_island_of(groups, g) for g in group)) > 1:
            errors.append("%s on %s: TP group %s crosses NVLink islands (%s); every tensor_parallel_size GPUs in a row "
                          "must come from one island" % (label, host, group, "; ".join(map(str, groups))))
    return errors


def _take(groups, free, tp):
    """Best fit: the island with the fewest free GPUs that still holds tp; its lowest free indices."""
    fitting = [(len([g for g in group if g in free]), group) for group in groups]
    fitting = [(count, group) for count, group in fitting if count >= tp]
    if not fitting:
        return None
    _count, group = min(fitting, key=lambda item: (item[0], item[1][0]))
    return [g for g in group if g in free][:tp]


def assign_gpus(replicas, nodes):
    """``(assignment, errors)``: assignment maps replica name -> {host: [GPU indices]} (stage order)."""
    errors, assignment, owner = [], dict((replica["name"], {}) for replica in replicas), {}
    groups = dict((name, _link_groups(node)) for name, node in nodes.items())
    for index, replica in enumerate(replicas):
        for host in replica["hosts"]:
            gpus = _explicit(replica, host)
            if gpus is None:
                continue
            found = _check_explicit(index, replica, host, nodes[host], gpus, groups[host])
            errors.extend(found)
            if found:
                continue
            for gpu in gpus:
                if (host, gpu) in owner:
                    errors.append("%s.gpus: GPU %d on %s is already given to replica %s; give each replica its own GPUs" % (
                        _label(index, replica), gpu, host, owner[(host, gpu)]))
                owner[(host, gpu)] = replica["name"]
            assignment[replica["name"]][host] = list(gpus)
    for index, replica in enumerate(replicas):
        tp = replica["tensor_parallel_size"]
        for host in replica["hosts"]:
            if _explicit(replica, host) is not None:
                continue
            free = set(range(nodes[host]["gpu_count"])) - set(gpu for (where, gpu) in owner if where == host)
            taken = []
            for _stage in range(stages_on_host(replica)):
                group = _take(groups[host], free - set(taken), tp)
                if group is None:
                    errors.append(
                        "%s: %s has no %d free GPU(s) inside one NVLink island left (free: %s; islands: %s; taken: %s); "
                        "lower tensor_parallel_size, move the replica to another host, or free GPUs with gpus: [...]" % (
                            _label(index, replica), host, tp, sorted(free - set(taken)) or "none",
                            "; ".join(map(str, groups[host])), _owners(owner, host) or "none"))
                    break
                taken.extend(group)
            else:
                for gpu in taken:
                    owner[(host, gpu)] = replica["name"]
                assignment[replica["name"]][host] = taken
    return assignment, errors


def _owners(owner, host):
    names = {}
    for (where, gpu), name in sorted(owner.items()):
        if where == host:
            names.setdefault(name, []).append(gpu)
    return ", ".join("%s=%s" % (name, gpus) for name, gpus in names.items())


def assign_ports(replicas, reserved=None):
    """``(ports, errors)``: each replica's API port on its first host. An explicit port is checked for clashes;
    a replica without one gets the lowest free port from DEFAULT_PORT up. ``reserved``: host -> {port: holder}."""
    errors, ports, taken = [], {}, {}
    for host, held in (reserved or {}).items():
        for port, holder in held.items():
            # A reserved port comes straight from another host's inventory (loadbalancer_port on a load balancer).
            if not str(port).isdigit() or not 0 < int(port) < 65536:
                errors.append("%s on %s must be a port number 1-65535, got %r" % (holder, host, port))
                continue
            taken[(host, int(port))] = holder
    for index, replica in enumerate(replicas):
        port = replica.get("port")
        if port is None:
            continue
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            errors.append("%s.port must be an integer port, got %r" % (_label(index, replica), port))
            continue
        host = replica["hosts"][0]
        holder = taken.get((host, port))
        if holder:
            errors.append("%s: port %d on %s is already taken by %s; give each replica on a host its own port "
                          "(vllm_cluster_replicas[%d].port), or leave port out and the plan picks a free one" % (
                              _label(index, replica), port, host, holder, index))
        taken[(host, port)] = "replica %s" % replica["name"]
        ports[replica["name"]] = port
    for replica in replicas:
        if replica.get("port") is not None:
            continue
        host, port = replica["hosts"][0], DEFAULT_PORT
        while (host, port) in taken:
            port += 1
        taken[(host, port)] = "replica %s" % replica["name"]
        ports[replica["name"]] = port
    return ports, errors


def host_gpus(plan_replicas, host, backend=None):
    """Sorted GPUs a host gives to the plan's replicas (only those of ``backend``, when given)."""
    gpus = set()
    for replica in plan_replicas:
        if backend is None or replica["backend"] == backend:
            gpus.update((replica.get("gpus") or {}).get(host, []))
    return sorted(gpus)


# Device nodes every CUDA process opens besides its GPUs' own /dev/nvidiaN.
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def unit_gpus(indices, facts_gpus=None):
    """What a unit needs to own exactly ``indices``: CUDA_VISIBLE_DEVICES and the device nodes to allow.

    UUIDs (from the host's GPU facts) where known: a unit whose device cgroup hides the other GPUs may see its
    own renumbered from 0, and a UUID names the same GPU either way; indices otherwise, read in PCI bus order
    (CUDA_DEVICE_ORDER=PCI_BUS_ID), which is nvidia-smi's and NVML's order.
    """
    if not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices):
        raise ValueError("GPU indices must be a list of non-negative integers, got %r" % (indices,))
    uuids = dict((gpu.get("index"), gpu.get("uuid")) for gpu in (facts_gpus or []))
    missing = [i for i in indices if facts_gpus and i not in uuids]
    if missing:
        raise ValueError("GPU(s) %s are not among the host's GPUs %s" % (missing, sorted(uuids)))
    names = [uuids.get(i) or str(i) for i in indices]
    if not all(_UUID.match(name) for name in names):
        names = [str(i) for i in indices]
    return {
        "visible_devices": ",".join(names),
        "devices": ["/dev/nvidia%d" % i for i in indices] + list(CONTROL_DEVICES),
    }
