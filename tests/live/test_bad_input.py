"""Bad input is refused in deploy.yml's first play, before any host changes.

Each case runs the real `playbooks/deploy.yml` against the live simulated cluster with one mistake in a
copy of its inventory (or, for hardware the sim hosts cannot have, a HARDWARE STAND-IN nvidia-smi capture
placed on a host for the duration of the case). Asserted for every case: the play fails, no play after the
first one starts, PLAY RECAP shows changed=0 on every host, and the error names the variable and the fix.
Runs after `molecule test -s sim --destroy never` (tests/run-all.sh), while the rig is up and deployed.
"""

import copy
import json
import os
import shutil
import subprocess
import time

import pytest
import yaml

import gpu_case_fixtures as fixtures
from sim_hosts import INVENTORY, REPO, ansible_env, load_inventory, playbook_argv, recap, ssh

FIRST_PLAY = "PLAY [Check every input and plan the replicas before any host changes]"
SECOND_PLAY = "PLAY [Pin the NVIDIA driver and fabric manager]"
RESULTS = os.path.join(REPO, "artifacts", "reliability", "bad-input")
H200 = {"sku": "NVIDIA H200", "memory_mib": 143771}
GROUP_VARS = load_inventory()[1]
LB_ALIAS = "lb0"


def replicas(*changes):
    """The sim's replicas with per-replica changes: (index, {key: value}) or a whole new replica dict."""
    layout = copy.deepcopy(GROUP_VARS["vllm_cluster_replicas"])
    for change in changes:
        if isinstance(change, dict):
            layout.append(change)
        else:
            layout[change[0]].update(change[1])
    return {"vllm_cluster_replicas": layout}


def model(**changes):
    return {"vllm_cluster_model": dict(copy.deepcopy(GROUP_VARS["vllm_cluster_model"]), **changes)}


def workload(**changes):
    return {"vllm_cluster_workload": dict(GROUP_VARS["vllm_cluster_workload"], **changes)}


def gpus(count, islands=None, **sku):
    declared = dict(H200, count=count, **sku)
    if islands:
        declared["islands"] = islands
    return {"vllm_cluster_node_gpus": declared}


FM_DOWNGRADE = ("apt-mark unhold nvidia-fabricmanager-580 >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install "
                "-y -q --allow-downgrades --allow-change-held-packages nvidia-fabricmanager-580=580.95.05-1 >/dev/null")
FM_RESTORE = ("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades --allow-change-held-packages "
              "nvidia-fabricmanager-580=580.159.04-1 >/dev/null && apt-mark hold nvidia-fabricmanager-580 >/dev/null")
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}

# id: (why, extra vars, host_vars {host: vars}, stand-in GPU captures {host: fixture}, setup/teardown {host: (cmd, cmd)},
#      text the error must contain)
CASES = {
    "tp_times_pp_above_gpus": (
        "tp*pp GPU workers on one host with 1 GPU", replicas((1, {"pipeline_parallel_size": 2})), {}, {}, {},
        ["tp*pp=2 GPU workers", "vllm_cluster_replicas[1]"]),
    "tp_above_gpus_per_node": (
        "TP 2 on 1-GPU nodes", replicas((0, {"tensor_parallel_size": 2})), {}, {}, {},
        ["tensor_parallel_size=2 is larger than the 1 GPU(s) of node1", "a TP group never crosses nodes"]),
    "tp_group_outside_nvlink_island": (
        "TP 4 on a node whose NVLink islands are pairs", replicas((1, {"tensor_parallel_size": 4})),
        {"node3": gpus(4, [[0, 1], [2, 3]])}, {"node3": fixtures.fixture(4, fixtures.nvlink_pairs)}, {},
        ["does not fit inside one NVLink island (largest has 2 GPUs)", "tensor_parallel_size<=2"]),
    "pp_above_nodes": (
        "PP 3 over 2 hosts", replicas((0, {"pipeline_parallel_size": 3})), {}, {}, {},
        ["pipeline_parallel_size=3 but 2 hosts listed", "list exactly pipeline_parallel_size hosts"]),
    "mixed_gpu_skus_in_replica": (
        "r0 spans an H200 node and an H100 node", {}, {"node2": gpus(1, sku=H100["name"], memory_mib=H100["memory_mib"])},
        {"node2": fixtures.fixture(1, **H100)}, {},
        ["mixed GPU SKUs in one replica", "group replicas by SKU"]),
    "driver_differs_from_pin": (
        "the pin names another driver than the one running", {"vllm_cluster_driver_version": "580.172.08"}, {}, {}, {},
        ["the host runs driver '580.159.04'", "nvidia_driver_allow_change: true"]),
    "fabric_manager_differs_from_driver": (
        "node3's fabric manager is an older release than its driver", {}, {}, {}, {"node3": (FM_DOWNGRADE, FM_RESTORE)},
        ["nvidia-fabricmanager-580 '580.95.05-1'", "the fabric manager must equal the driver exactly"]),
    "mig_enabled_with_tp": (
        "TP 2 over MIG-enabled GPUs", replicas((1, {"tensor_parallel_size": 2})), {"node3": gpus(2)},
        {"node3": fixtures.fixture(2, mig="Enabled")}, {},
        ["node3 has MIG enabled", "disable MIG or use TP=1"]),
    "nccl_interface_unknown": (
        "an interface no host has", {"nccl_interface": "eth9"}, {}, {}, {},
        ["nccl_interface is 'eth9' (no such interface here)", "leave nccl_interface empty"]),
    "nccl_address_on_no_interface": (
        "a cluster address no interface holds", {"nccl_cluster_address": "10.213.7.99"}, {}, {}, {},
        ["no interface holds nccl_cluster_address 10.213.7.99", "Set nccl_cluster_address"]),
    "nccl_interface_names_differ": (
        "one cluster-wide interface name while node2's cluster address is on another interface",
        {"nccl_interface": "host0"}, {"node2": {"nccl_cluster_address": "127.0.0.1"}}, {}, {},
        ["Interface names differ across nodes (node1=host0, node2=lo, node3=host0)", "host_vars/node2.yml"]),
    "vllm_host_ip_not_ray_node_ip": (
        "vLLM announces another address than Ray's node IP", {"vllm_serve_host_ip": "10.213.7.99"}, {}, {}, {},
        ["VLLM_HOST_IP must equal the Ray node IP", "Remove the override"]),
    "model_revision_not_a_sha": (
        "a branch name as the model revision", model(revision="main"), {}, {}, {},
        ["model_cache_revision must be a 40-hex commit sha", "got 'main'"]),
    "model_files_missing_on_a_node": (
        "node3 lost the shared cache (an empty filesystem over it)", {}, {}, {},
        {"node3": ("mount -t tmpfs -o size=1m tmpfs /srv/vllm-cache", "umount /srv/vllm-cache")},
        ["node3: the snapshot is staged on node1 but", "model files missing on this node"]),
    "manifest_not_the_pinned_one": (
        "the staged manifest differs from the pinned digest", model(manifest_digest="0" * 64), {}, {}, {},
        ["but model_cache_manifest_digest (vllm_cluster_model.manifest_digest) pins " + "0" * 64]),
    "model_does_not_fit": (
        "a KV cache for a million concurrent sequences", workload(concurrency=1000000), {}, {}, {},
        ["GiB per GPU", "GiB is usable", "vllm_cluster_workload.max_model_len/concurrency"]),
    "max_model_len_above_model": (
        "max_model_len 4096 for a 2048-token model", workload(max_model_len=4096), {}, {}, {},
        ["max_model_len=4096 is above the model's limit 2048", "lower it to at most 2048"]),
    "port_clash_between_replicas": (
        "two replicas on node3 both on port 8000",
        replicas({"name": "r2", "hosts": ["node3"], "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "port": 8000}),
        {"node3": gpus(2)}, {"node3": fixtures.fixture(2)}, {},
        ["port 8000 on node3 is already taken by replica r1", "vllm_cluster_replicas[2].port"]),
    "port_clash_with_load_balancer": (
        "r0 on HAProxy's port", replicas((0, {"port": 8080})), {}, {}, {},
        ["port 8080 on node1 is already taken by HAProxy (loadbalancer_port)"]),
    "api_key_missing": (
        "no API key", {"vllm_cluster_api_key": ""}, {}, {}, {},
        ["vllm_serve_api_key (vllm_cluster_api_key) must be at least 16 printable characters", "openssl rand"]),
    # Hostile values that used to get past the first play (issue 16): each would reach a unit, a file or argv.
    "model_id_with_shell_metacharacters": (
        "a model id with a shell command in it", model(id="x/y; touch /tmp/p #"), {}, {}, {},
        ["vllm_cluster_model.id 'x/y; touch /tmp/p #' is not a hub repo id"]),
    "served_name_with_space_and_semicolon": (
        "a served name that split ExecStart into two names", model(served_name="tiny llama;id"), {}, {}, {},
        ["vllm_cluster_model.served_name 'tiny llama;id' may hold only", "no spaces"]),
    "replica_name_as_a_path": (
        "a replica name that climbs out of /etc/vllm", replicas((1, {"name": "../../etc/evil"})), {}, {}, {},
        ["vllm_cluster_replicas[1].name '../../etc/evil'"]),
    "api_key_with_a_newline": (
        "an API key that adds LD_PRELOAD to the environment file",
        {"vllm_cluster_api_key": "sim-api-key-0123456789\nLD_PRELOAD=/tmp/p.so"}, {}, {}, {},
        ["must be at least 16 printable characters with no whitespace"]),
    "extra_args_set_the_api_key": (
        "the API key passed on vLLM's command line", {"vllm_serve_extra_args": ["--api-key", "sim-api-key-0123456789"]},
        {}, {}, {}, ["vllm_serve_extra_args[0] sets --api-key", "vllm_cluster_api_key"]),
    "serving_floor_not_a_number": (
        "a serving floor spelt out", {"vllm_cluster_min_serving_replicas": "one"}, {}, {}, {},
        ["vllm_cluster_min_serving_replicas must be a whole number of replicas, 0 or more (got one)"]),
    "environment_replaces_the_api_key": (
        "an environment entry that would replace the API key unseen (a later line of the same file)",
        {"vllm_serve_environment": {"VLLM_API_KEY": "another-key-0123456789"}}, {}, {}, {},
        ["vllm_serve_environment sets VLLM_API_KEY, which the collection writes itself", "vllm_cluster_api_key"]),
    "ray_version_differs_across_nodes": (
        "node3 pins another Ray", {}, {"node3": {"vllm_cluster_ray_version": "2.59.0"}}, {}, {},
        ["node3=2.59.0", "once for the group vllm_nodes"]),
    "dev_shm_too_small": (
        "a /dev/shm floor above what the hosts have", {"preflight_min_shm_mib": 1000000}, {}, {}, {},
        ["/dev/shm holds", "but preflight_min_shm_mib is 1000000"]),
    "unsupported_os": (
        "Debian 12 hosts where only Ubuntu 24 is supported", {"preflight_supported_platforms": {"Ubuntu": ["24"]}},
        {}, {}, {}, ["runs Debian 12", "preflight_supported_platforms"]),
    "wrong_type": (
        "a port that is not a number", {"loadbalancer_port": "eighty"}, {}, {}, {},
        ["loadbalancer_port", "int"]),
    # lb0: a load balancer outside vllm_nodes (node1 under a second name), whose variables the first play never sees.
    "separate_lb_check_model": (
        "a separate load balancer's check model with a space (it reaches haproxy.cfg)",
        {}, {LB_ALIAS: {"loadbalancer_check_model": "tiny llama"}}, {}, {},
        ["loadbalancer_check_model"]),
    "separate_lb_wrong_type": (
        "a separate load balancer's port that is not a number", {}, {LB_ALIAS: {"loadbalancer_port": "eighty"}}, {}, {},
        ["HAProxy (loadbalancer_port) on lb0 must be a port number 1-65535, got 'eighty'"]),
    "plain_http_package_source": (
        "the wheel source over plain http without the inventory trusting it", {"vllm_cluster_allow_http_index": False},
        {}, {}, {}, ["is plain http (http://", "vllm_cluster_allow_http_index: true"]),
    "unknown_workload_key": (
        "a misspelt workload key", workload(max_num_seq=8), {}, {}, {},
        ["vllm_cluster_workload has unknown key(s) max_num_seq"]),
}


def _write_inventory(tmp_path, host_vars):
    inventory = tmp_path / "inventory"
    shutil.copytree(INVENTORY, inventory)
    if LB_ALIAS in host_vars:
        hosts = load_inventory()[0]
        node1 = hosts["all"]["children"]["vllm_nodes"]["hosts"]["node1"]
        hosts["all"]["children"]["vllm_loadbalancers"] = {"hosts": {LB_ALIAS: {"ansible_host": node1["ansible_host"]}}}
        (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "host_vars").mkdir(exist_ok=True)
    for host, variables in host_vars.items():
        (inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(variables))
    return inventory


def _place_capture(host, files):
    ssh(host, "rm -rf /run/llmserve-case && mkdir -p /run/llmserve-case/fixture")
    for name, text in files.items():
        ssh(host, "cat > /run/llmserve-case/fixture/%s" % name, stdin=text)
    # The stand-in nvidia-smi honours NVIDIA_SMI_FIXTURE_DIR; /usr/local/bin comes first on PATH.
    ssh(host, "printf '#!/bin/sh\\nNVIDIA_SMI_FIXTURE_DIR=/run/llmserve-case/fixture exec "
              "/usr/share/nvidia-standin/nvidia-smi-replay \"$@\"\\n' > /usr/local/bin/nvidia-smi && "
              "chmod 0755 /usr/local/bin/nvidia-smi")


def _remove_capture(host):
    ssh(host, "rm -rf /usr/local/bin/nvidia-smi /run/llmserve-case", check=False)


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
def test_refused_in_preflight_with_nothing_changed(case, tmp_path):
    why, extra, host_vars, captures, setups, expected = CASES[case]
    inventory = _write_inventory(tmp_path, host_vars)
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(json.dumps(extra))
    touched = []
    try:
        for host, files in captures.items():
            touched.append(host)
            _place_capture(host, files)
        for host, (setup, _teardown) in setups.items():
            ssh(host, setup, timeout=300)
        start = time.monotonic()
        run = subprocess.run(playbook_argv("playbooks/deploy.yml", inventory, "-e", "@%s" % extra_file),
                             cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False)
        seconds = time.monotonic() - start
    finally:
        for host in touched:
            _remove_capture(host)
        for host, (_setup, teardown) in setups.items():
            ssh(host, teardown, timeout=300)
    counts = recap(run.stdout)
    found = [text for text in expected if text in run.stdout]
    result = {"case": case, "why": why, "rc": run.returncode, "seconds": round(seconds, 1),
              "changed": {host: count["changed"] for host, count in counts.items()},
              "failed_hosts": sorted(host for host, count in counts.items() if count["failed"]),
              "named": len(found) == len(expected), "second_play_started": SECOND_PLAY in run.stdout}
    result["refused_correctly"] = (run.returncode != 0 and FIRST_PLAY in run.stdout and not result["second_play_started"]
                                   and counts and not any(result["changed"].values()) and result["named"])
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "%s.json" % case), "w") as handle:
        json.dump(result, handle, indent=1)
    tail = run.stdout[-4000:]
    assert run.returncode != 0, "deploy.yml accepted the bad input (%s):\n%s" % (why, tail)
    assert FIRST_PLAY in run.stdout and not result["second_play_started"], "failed outside preflight:\n" + tail
    assert counts and not any(result["changed"].values()), "a host changed: %s\n%s" % (result["changed"], tail)
    assert result["named"], "the error lacks %s:\n%s" % ([t for t in expected if t not in found], tail)
    assert GROUP_VARS["vllm_cluster_api_key"] not in run.stdout + run.stderr, "the API key is in Ansible's output"


def test_summary_table():
    rows = []
    for name in sorted(os.listdir(RESULTS)) if os.path.isdir(RESULTS) else []:
        with open(os.path.join(RESULTS, name)) as handle:
            rows.append(json.load(handle))
    rows = [row for row in rows if row["case"] in CASES]
    assert len(CASES) >= 20
    lines = ["%-36s %-8s %-6s %s" % ("bad input case", "refused", "s", "changed on hosts")]
    lines += ["%-36s %-8s %-6.1f %s" % (row["case"], "yes" if row["refused_correctly"] else "NO", row["seconds"],
                                        sum(row["changed"].values())) for row in rows]
    lines.append("cases tried %d, refused correctly %d" % (len(rows), sum(row["refused_correctly"] for row in rows)))
    text = "\n".join(lines)
    with open(os.path.join(os.path.dirname(RESULTS), "bad-input.txt"), "w") as handle:
        handle.write(text + "\n")
    print("\n" + text)
    assert len(rows) == len(CASES) and all(row["refused_correctly"] for row in rows), text
