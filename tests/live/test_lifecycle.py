"""Day-2 operations on the live sim through the runbook package: rolling restart under load, drift, the
troubleshooting bundle and an acceptance verdict. Each leaves the cluster as it found it.

Runs after `molecule test -s sim --destroy never` (tests/run-all.sh), while the rig is up and deployed.
"""

import glob
import json
import os
import tarfile

import pytest

from runbook_cli import record, runbook
from sim_hosts import REPLICA_HOSTS, SteadyClient, haproxy_status, load_inventory, main_pids, mitogen_env, ssh

HOSTS, GROUP_VARS = load_inventory()
NODES = sorted(HOSTS["all"]["children"]["vllm_nodes"]["hosts"])
pytestmark = pytest.mark.usefixtures("replicas_serving")
API_KEY = GROUP_VARS["vllm_cluster_api_key"]


def test_rolling_restart_under_load_fails_no_request():
    before = main_pids()
    # r1 alone: test_rollout.py rolls both replicas through the same role under load; this proves the runbook
    # command and its replica selection (r0's restart is the slow one, about 170 s of CI time).
    with SteadyClient(workers=1, pause=0.2) as client:
        result, progress = runbook("rolling-restart", "-e", json.dumps({"rolling_restart_replicas": ["r1"]}))
    assert result["exit_code"] == 0 and result["status"] == "successful", progress[-3000:]
    assert all(host["failed"] == 0 and host["unreachable"] == 0 for host in result["hosts"].values())
    roll = result["outputs"]["rolling_restart_record"]["replicas"]
    assert [entry["name"] for entry in roll] == ["r1"]
    after = main_pids()
    assert after["r1@node3"] != before["r1@node3"], (before, after)
    assert after["r0@node1"] == before["r0@node1"] and after["r0@node2"] == before["r0@node2"], (before, after)
    failed = [entry for entry in client.records if entry["error"]]
    assert len(client.records) > 20 and not failed, failed[:5]
    assert all(haproxy_status(name) == "UP" for name in REPLICA_HOSTS)
    record("rolling_restart", {"requests": len(client.records), "failed": len(failed), "seconds": result["seconds"],
                               "replicas": [{key: entry[key] for key in ("name", "sessions_at_drain", "drain_s", "ready_s", "back_s")}
                                            for entry in roll]})


def test_drift_names_each_differing_pin_and_changes_nothing():
    unit = "/etc/systemd/system/vllm-r1.service"
    original = ssh("node3", "cat %s" % unit).stdout
    edited = original.replace("--max-model-len 1024", "--max-model-len 512")
    assert edited != original
    ssh("node3", "cat > %s" % unit, stdin=edited)
    model = dict(GROUP_VARS["vllm_cluster_model"], revision="0" * 40)
    try:
        result, progress = runbook("drift", "-e", "vllm_cluster_driver_version=580.172.08", "-e", json.dumps({"vllm_cluster_model": model}))
        still = ssh("node3", "cat %s" % unit).stdout
    finally:
        ssh("node3", "cat > %s" % unit, stdin=original)
    assert result["exit_code"] == 4, progress[-3000:]
    assert still == edited, "drift changed the unit it reported"
    changes = result["changes"]
    by_area = {}
    for change in changes:
        by_area.setdefault(change["area"], set()).add(change["host"])
    assert by_area["driver / fabric manager"] == set(NODES)
    assert set(NODES) <= by_area["vLLM unit"]
    unit_diffs = "\n".join(change.get("diff", "") for change in changes if change["area"] == "vLLM unit" and change["host"] == "node3")
    assert "--max-model-len 512" in unit_diffs and "--max-model-len 1024" in unit_diffs and "0" * 40 in unit_diffs
    assert "model revision / cache" in by_area
    # What a real run would restart, one replica at a time, and why (deploy --check --diff lists it).
    restarts = {entry["replica"]: entry["hosts"] for entry in result["outputs"]["deploy_restarts"]}
    assert restarts == {"r0": {"node1": ["unit"], "node2": ["unit"]}, "r1": {"node3": ["unit"]}}, restarts
    assert API_KEY not in json.dumps(result) and API_KEY not in progress
    record("drift", {"changes": len(changes), "areas": {area: sorted(hosts) for area, hosts in by_area.items()},
                     "seconds": result["seconds"]})


def test_deploy_through_the_runbook_changes_nothing_on_a_deployed_cluster():
    # With Mitogen's strategy, the documented faster option (scripts/mitogen-env.sh): molecule's idempotence run
    # already proves the same no-op with Ansible's own strategy.
    result, progress = runbook("deploy", env=mitogen_env())
    assert result["exit_code"] == 0 and result["status"] == "successful", progress[-3000:]
    # ansible-runner's record of the command's environment (names only): the strategy reached ansible-playbook.
    commands = glob.glob(os.path.join(result["runner_dir"], "artifacts", "*", "command"))
    assert commands, result["runner_dir"]
    for path in commands:
        with open(path) as handle:
            assert "ANSIBLE_STRATEGY" in json.load(handle)["env"], path
    assert set(result["hosts"]) == set(NODES)
    assert all(host["changed"] == 0 and host["failed"] == 0 for host in result["hosts"].values()), result["hosts"]
    assert result["outputs"]["deploy_restarts"] == [], "a no-op deploy restarts nothing"
    deployed = result["outputs"]["deploy_record"]
    assert deployed["endpoint"].endswith(":8080/v1") and len(deployed["replicas"]) == 2 and os.path.exists(deployed["path"])
    assert API_KEY not in json.dumps(result)
    record("runbook_deploy", {"seconds": result["seconds"], "changed": 0, "strategy": "mitogen_linear"})


def test_collect_bundle_names_the_cause_of_a_stopped_rank():
    # A multi-node replica whose second rank is down: the guide's "multi-node hang".
    ssh("node2", "systemctl stop vllm-r0.service")
    try:
        result, progress = runbook("collect")
    finally:
        ssh("node2", "systemctl start vllm-r0.service")
        ssh("node1", "systemctl restart vllm-r0.service")
    assert result["exit_code"] == 0, progress[-3000:]
    bundle = result["outputs"]["collect_bundle"]
    assert os.path.exists(bundle["archive"])
    with tarfile.open(bundle["archive"]) as archive:
        names = archive.getnames()
        texts = {name: archive.extractfile(name).read().decode("utf-8", "replace") for name in names if archive.getmember(name).isfile()}
    base = os.path.basename(bundle["directory"])
    for host in NODES:
        for capture in ("addresses.json", "network.env", "firewall.nft", "units.txt", "journal.txt", "gpus.csv", "topology.txt",
                        "model.json"):
            assert "%s/nodes/%s/%s" % (base, host, capture) in names
    assert "%s/nodes/node1/ray.json" % base in names and "%s/loadbalancer/haproxy-stats.csv" % base in names
    # The Ray units by the names ray_cluster writes (the bundle once asked for a ray.service no role writes).
    assert "ray-head.service" in texts["%s/nodes/node1/units.txt" % base]
    assert "ray-worker.service" in texts["%s/nodes/node2/units.txt" % base]
    assert json.loads(texts["%s/nodes/node3/model.json" % base])["verified"] is True
    assert "vllm:" in texts["%s/nodes/node3/metrics-r1.txt" % base]
    summary = texts["%s/SUMMARY.md" % base]
    hang = [entry for entry in bundle["results"] if entry["pattern"] == "multi_node_hang"][0]
    assert hang["likely"] and any("replica r0: its ranks differ" in finding for finding in hang["findings"]), hang
    assert "A replica spanning nodes hangs or never becomes ready: LIKELY" in summary
    assert not any(API_KEY in text for text in texts.values())
    record("collect", {"files": len(names), "likely": bundle["likely"], "seconds": result["seconds"]})


def test_acceptance_through_the_runbook_returns_its_verdict_and_report():
    # The first requests after a restart (the collect test restarts r0) can take over a second on these cores: this
    # run checks the runbook's verdict and report plumbing, not the cluster's latency.
    result, progress = runbook("acceptance", "--tags", "short_prompt", "-e", "acceptance_slo_p95_ttft_ms=30000")
    assert result["exit_code"] == 0 and result["verdict"] == "pass", progress[-3000:]
    with open(result["report"]) as handle:
        report = json.load(handle)
    assert report["verdict"] == "pass" and report["stages"]["short_prompt"]
    # A gate that cannot pass: exit code 3 (gate), the report still written.
    failing, progress = runbook("acceptance", "--tags", "short_prompt", "-e", "acceptance_slo_p95_ttft_ms=1")
    assert failing["exit_code"] == 3 and failing["verdict"] == "fail" and os.path.exists(failing["report"]), progress[-3000:]
    record("runbook_acceptance", {"pass_seconds": result["seconds"], "fail_seconds": failing["seconds"]})
