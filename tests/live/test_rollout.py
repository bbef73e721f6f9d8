"""Re-deploys that change running replicas (issue 26): one replica at a time through HAProxy's drain, gated on a real
completion; the first that fails is put back on its previous files, the replicas after it are never touched, and a
steady client sees no failed request. A change to the Ray units restarts the head first, then the workers. Each test
leaves the cluster as it found it.

Runs after `molecule test -s sim --destroy never` (tests/run-all.sh), while the rig is up and deployed.
"""

import glob
import json
import os
import threading
import time

import pytest

from runbook_cli import ARTIFACTS, record, runbook
from sim_hosts import REPLICA_HOSTS, SteadyClient, haproxy_status, load_inventory, main_pids, ssh

HOSTS, GROUP_VARS = load_inventory()
pytestmark = pytest.mark.usefixtures("replicas_serving")
FILES = {"r0": ["/etc/vllm/r0.env", "/etc/systemd/system/vllm-r0.service"],
         "r1": ["/etc/vllm/r1.env", "/etc/systemd/system/vllm-r1.service"]}
ENVIRONMENT = GROUP_VARS["vllm_serve_environment"]


RAY_NODES = sorted(HOSTS["all"]["children"]["vllm_nodes"]["hosts"])
RAY_HEAD = RAY_NODES[0]


def ray_unit(host):
    return "ray-head.service" if host == RAY_HEAD else "ray-worker.service"


def ray_started_at(host):
    """When the Ray unit's main process started, on the monotonic clock of the one kernel under every sim host."""
    return int(ssh(host, "systemctl show -p ExecMainStartTimestampMonotonic --value %s" % ray_unit(host)).stdout) / 1e6


def file_digests():
    return {"%s:%s" % (host, path): ssh(host, "sha256sum %s" % path).stdout.split()[0]
            for replica, hosts in REPLICA_HOSTS.items() for host in hosts for path in FILES[replica]}


def previous_dirs():
    return {host: ssh(host, "ls /etc/vllm/previous 2>/dev/null", check=False).stdout.split() for host in ("node1", "node2", "node3")}


def test_a_change_that_breaks_replicas_stops_at_the_first_and_puts_it_back():
    # An operator's typo that every replica would die of: vLLM refuses an unknown logging level at import.
    broken = dict(ENVIRONMENT, VLLM_LOGGING_LEVEL="NOPE")
    pids, digests = main_pids(), file_digests()
    result, progress, records = roll({"vllm_serve_environment": broken})
    assert result["exit_code"] == 3, progress[-3000:]
    rollback = result["outputs"]["rolling_restart_rollback"]
    assert rollback["replica"] == "r0" and rollback["serves_again"] and rollback["not_touched"] == ["r1"], rollback
    assert {change["variable"] for change in rollback["changes"]} == {"vllm_serve_environment['VLLM_LOGGING_LEVEL']"}
    assert {change["host"] for change in rollback["changes"]} == {"node1", "node2"}
    # The gate ends on the unit's restart (vLLM exits once it configures logging), not after its timeout.
    assert float(rollback["gate_failed_s"]) < 180, rollback
    failure = "\n".join(item["message"] for item in result["failures"])
    assert "vllm_serve_environment['VLLM_LOGGING_LEVEL']" in failure and "serves again" in failure, failure
    assert "NOPE" in failure, "the log tail should show vLLM's own error"
    assert result["outputs"]["deploy_restarts"] == [{"replica": "r0", "hosts": {"node1": ["environment file"], "node2": ["environment file"]}},
                                                    {"replica": "r1", "hosts": {"node3": ["environment file"]}}]
    after = main_pids()
    assert after["r1@node3"] == pids["r1@node3"], "r1 was restarted"
    assert after["r0@node1"] != pids["r0@node1"], "r0 was never restarted"
    assert file_digests() == digests, "every replica's files are as they were before the deploy"
    assert previous_dirs() == {"node1": [], "node2": [], "node3": []}
    failed = [entry for entry in records if entry["error"]]
    assert len(records) > 20 and not failed, failed[:5]
    assert all(haproxy_status(name) == "UP" for name in REPLICA_HOSTS)
    record("rollout_rollback", {"requests": len(records), "failed": len(failed), "seconds": result["seconds"],
                                "gate_failed_s": rollback["gate_failed_s"], "rolled_back_s": rollback["rolled_back_s"],
                                "changes": rollback["changes"]})


def roll(extra_vars=None):
    """A deploy with a steady client from the play that writes the replicas' files to the end, so its load does
    not slow the plays before it (which touch no replica); returns (result, progress, client records)."""
    started, outcome = time.time(), {}
    args = ("-e", json.dumps(extra_vars)) if extra_vars else ()
    worker = threading.Thread(target=lambda: outcome.update(zip(("result", "progress"), runbook("deploy", *args))))
    worker.start()
    while worker.is_alive() and not _reached("PLAY [Serve every replica]", started):
        time.sleep(1)
    with SteadyClient(workers=1, pause=0.5) as client:
        worker.join()
    return outcome["result"], outcome["progress"], client.records


def _reached(marker, since):
    """Whether the newest runbook deploy started after ``since`` has printed ``marker``."""
    for stdout in glob.glob(os.path.join(ARTIFACTS, "runbook", "deploy-*", "artifacts", "*", "stdout")):
        if os.path.getmtime(stdout) >= since:
            with open(stdout, errors="replace") as handle:
                if marker in handle.read():
                    return True
    return False


def test_a_re_deploy_that_changes_every_replica_restarts_them_in_turn_with_no_failed_request():
    # Each replica's environment file differs from what the inventory renders (as after an inventory change), so
    # the re-deploy rewrites every one and must restart every replica, one at a time.
    for replica, hosts in REPLICA_HOSTS.items():
        for host in hosts:
            ssh(host, "echo LLMSERVE_DRIFTED=1 >> /etc/vllm/%s.env" % replica)
    # The Ray units too: the head must go first, each worker only once the head's GCS answers.
    since = ssh(RAY_HEAD, "date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    for host in RAY_NODES:
        ssh(host, "echo '# drifted' >> /etc/systemd/system/%s" % ray_unit(host))
    pids, ray_before = main_pids(), {host: ray_started_at(host) for host in RAY_NODES}
    result, progress, records = roll()
    assert result["exit_code"] == 0, progress[-3000:]
    ray_after = {host: ray_started_at(host) for host in RAY_NODES}
    assert all(ray_after[host] > ray_before[host] for host in RAY_NODES), (ray_before, ray_after)
    for worker in RAY_NODES[1:]:
        # The head's `ray start` takes seconds to open GCS; restarted in one step, the workers went within a second.
        assert ray_after[worker] > ray_after[RAY_HEAD] + 1, (worker, ray_after)
        journal = ssh(worker, "journalctl -u ray-worker.service --since '%s' -o cat" % since).stdout
        assert "Scheduled restart job" not in journal, "%s crashed without its head:\n%s" % (worker, journal[-2000:])
        assert "# drifted" not in ssh(worker, "cat /etc/systemd/system/ray-worker.service").stdout
    assert result["outputs"]["deploy_restarts"] == [
        {"replica": "r0", "hosts": {"node1": ["environment file"], "node2": ["environment file"]}},
        {"replica": "r1", "hosts": {"node3": ["environment file"]}}]
    roll_record = result["outputs"]["rolling_restart_record"]["replicas"]
    assert [entry["name"] for entry in roll_record] == ["r0", "r1"]
    after = main_pids()
    assert all(after[unit] != pids[unit] for unit in pids), (pids, after)
    assert all("LLMSERVE_DRIFTED" not in ssh(host, "cat /etc/vllm/%s.env" % replica).stdout
               for replica, hosts in REPLICA_HOSTS.items() for host in hosts)
    assert previous_dirs() == {"node1": [], "node2": [], "node3": []}
    failed = [entry for entry in records if entry["error"]]
    assert len(records) > 20 and not failed, failed[:5]
    assert all(haproxy_status(name) == "UP" for name in REPLICA_HOSTS)
    record("rollout_every_replica", {
        "requests": len(records), "failed": len(failed), "seconds": result["seconds"],
        "replicas": [{key: entry[key] for key in ("name", "drain_s", "ready_s", "back_s")} for entry in roll_record],
        "ray_workers_after_head_s": {host: round(ray_after[host] - ray_after[RAY_HEAD], 1) for host in RAY_NODES[1:]}})
