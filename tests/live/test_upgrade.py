"""upgrade.yml on the live sim through the runbook: a canary that fails its gate is rolled back and the old revision
keeps serving; one that passes takes every replica to the new revision one at a time, with no failed request.

The new revision is a second snapshot of the tiny model (its generation config changed), made on the controller in
the rig's import share. Runs last among the live tests (the cluster is left on the new revision; the rig goes next).
"""

import hashlib
import json
import os
import shutil
import time

import pytest

from runbook_cli import record, runbook
from sim_hosts import SteadyClient, haproxy_status, load_inventory, ssh

HOSTS, GROUP_VARS = load_inventory()
NODES = sorted(HOSTS["all"]["children"]["vllm_nodes"]["hosts"])
MODELS = os.environ.get("LLMSERVE_SIM_MODELS", os.path.join(os.environ.get("LLMSERVE_SIM_CACHE", "/var/cache/llmserve-sim"), "models"))
OLD = GROUP_VARS["vllm_cluster_model"]["revision"]
UNIT_OF = {"node1": "vllm-r0", "node2": "vllm-r0", "node3": "vllm-r1"}


@pytest.fixture(scope="module")
def new_revision():
    """A second snapshot beside the first in the import share; its revision label is the sha1 of its sha256 listing."""
    source, target = os.path.join(MODELS, "tiny-llama"), os.path.join(MODELS, "tiny-llama-rev2")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    path = os.path.join(target, "generation_config.json")
    with open(path) as handle:
        config = json.load(handle)
    config["max_new_tokens"] = 64
    with open(path, "w") as handle:
        json.dump(config, handle, indent=2)
    listing = "".join("%s  %s\n" % (hashlib.sha256(open(os.path.join(target, name), "rb").read()).hexdigest(), name)
                      for name in sorted(os.listdir(target)))
    yield {"revision": hashlib.sha1(listing.encode()).hexdigest(), "source": "/srv/model-import/tiny-llama-rev2"}
    shutil.rmtree(target, ignore_errors=True)


def live(host):
    return json.loads(ssh(host, "cat /var/lib/vllm-cluster/live.json").stdout)


def serving_revision(host):
    unit = ssh(host, "systemctl cat %s.service" % UNIT_OF[host]).stdout
    return unit.split("--revision ", 1)[1].split()[0]


def wait_up(limit=600):
    deadline = time.monotonic() + limit
    while not all(haproxy_status(name) == "UP" for name in ("r0", "r1")):
        assert time.monotonic() < deadline, "replicas not UP"
        time.sleep(2)


def test_failed_gate_rolls_the_canary_back(new_revision):
    wait_up()
    result, progress = runbook("upgrade", "-e", "upgrade_model_revision=%s" % new_revision["revision"],
                               "-e", "model_cache_source_path=%s" % new_revision["source"],
                               "-e", "upgrade_gate_p95_ttft_ms=1")
    assert result["exit_code"] == 3 and result["verdict"] == "rolled_back", progress[-4000:]
    upgrade = result["outputs"]["upgrade_record"]
    assert upgrade["canary"] == "r1" and upgrade["gate"]["verdict"] == "fail"
    assert upgrade["live"]["revision"] == OLD
    assert all(live(host)["live"]["revision"] == OLD for host in NODES)
    assert all(serving_revision(host) == OLD for host in NODES)
    # The new snapshot stays staged beside the old one for the next try.
    ssh("node3", "test -d /srv/vllm-cache/models/*/%s && test -d /srv/vllm-cache/models/*/%s" % (OLD, new_revision["revision"]))
    wait_up()
    record("upgrade_rolled_back", {"seconds": result["seconds"], "gate": upgrade["gate"]["stage_verdicts"]})


def test_passing_gate_upgrades_every_replica_without_a_failed_request(new_revision):
    wait_up()
    with SteadyClient(workers=1, pause=0.2) as client:
        result, progress = runbook("upgrade", "-e", "upgrade_model_revision=%s" % new_revision["revision"],
                                   "-e", "model_cache_source_path=%s" % new_revision["source"])
    assert result["exit_code"] == 0 and result["verdict"] == "upgraded", progress[-4000:]
    upgrade = result["outputs"]["upgrade_record"]
    assert upgrade["order"] == ["r1", "r0"] and upgrade["gate"]["verdict"] == "pass"
    for host in NODES:
        assert live(host) == {"live": upgrade["to"], "previous": upgrade["from"]}
        assert serving_revision(host) == new_revision["revision"]
    failed = [entry for entry in client.records if entry["error"]]
    assert len(client.records) > 20 and not failed, failed[:5]
    wait_up()
    record("upgrade", {"seconds": result["seconds"], "requests": len(client.records), "failed": len(failed)})
