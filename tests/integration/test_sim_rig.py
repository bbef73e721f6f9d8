"""The simulated cluster rig: real systemd-nspawn hosts, real SSH, private bridge with no route out.

Uses its own state dir, bridge and subnet, so a rig a person left up is not touched.
"""

import json
import os
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RIG = os.path.join(REPO, "tests", "sim", "rig.sh")
EMPTY_CFG = os.path.join(REPO, "tests", "integration", "empty-ansible.cfg")
COUNT = 3

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="the rig needs root (nspawn, overlay mounts, a bridge)")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    state = "/run/llmserve-sim-test"
    inventory = str(tmp_path_factory.mktemp("sim") / "hosts.yml")
    env = dict(os.environ, LLMSERVE_SIM_STATE=state, LLMSERVE_SIM_BRIDGE="llmsimt0", LLMSERVE_SIM_NET="10.213.8",
               LLMSERVE_SIM_INVENTORY=inventory)
    subprocess.run([RIG, "down"], env=env, check=False, capture_output=True, timeout=120)
    up = subprocess.run([RIG, "up", str(COUNT)], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert up.returncode == 0, up.stderr
    yield {"env": env, "inventory": inventory, "state": state, "log": up.stderr}
    subprocess.run([RIG, "down"], env=env, check=False, capture_output=True, timeout=120)


def _ansible(rig, pattern, module, args=None):
    env = dict(rig["env"], ANSIBLE_CONFIG=EMPTY_CFG, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".ansible", "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="false")
    cmd = [shutil.which("ansible"), pattern, "-i", rig["inventory"], "-o", "-m", module]
    if args:
        cmd += ["-a", args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    results = {}
    for line in proc.stdout.splitlines():
        host, _sep, rest = line.partition(" | ")
        if not rest:
            continue
        status, _sep, payload = rest.partition(" => ")
        if payload:
            results[host] = (status, json.loads(payload))
        else:
            results[host] = (status.split(" | ")[0], {"stdout": rest.split("(stdout) ", 1)[-1]})
    return results


def test_every_host_answers_over_ssh(rig):
    results = _ansible(rig, "all", "ansible.builtin.ping")
    assert sorted(results) == ["node%d" % i for i in range(1, COUNT + 1)]
    assert all(status == "SUCCESS" and out["ping"] == "pong" for status, out in results.values())


def test_systemd_is_pid1_and_running(rig):
    results = _ansible(rig, "all", "ansible.builtin.command", "systemctl is-system-running --wait")
    states = {host: out["stdout"] for host, (_status, out) in results.items()}
    # A degraded host names its failed units and their last log lines in the failure message.
    failed = _ansible(rig, "all", "ansible.builtin.shell",
                      "for u in $(systemctl --failed --no-legend --plain | cut -d' ' -f1); do journalctl -b -n 8 -u $u; done")
    evidence = "\n".join("%s:\n%s" % (host, out.get("stdout", "")) for host, (_status, out) in sorted(failed.items()))
    assert states == {"node%d" % i: "running" for i in range(1, COUNT + 1)}, evidence
    pid1 = _ansible(rig, "node1", "ansible.builtin.command", "cat /proc/1/comm")
    assert pid1["node1"][1]["stdout"] == "systemd"


def test_hosts_have_their_own_address_and_no_route_out(rig):
    results = _ansible(rig, "all", "ansible.builtin.command", "ip -o -4 addr show dev host0")
    for i in range(1, COUNT + 1):
        assert "inet 10.213.8.%d/24" % (10 + i) in results["node%d" % i][1]["stdout"]
    routes = _ansible(rig, "all", "ansible.builtin.command", "ip route show default")
    assert len(routes) == COUNT and not any("default" in out["stdout"] for _status, out in routes.values())
    # Asking the kernel for a route sends nothing; it must have none beyond the /24.
    probe = _ansible(rig, "node1", "ansible.builtin.shell", "ip route get 192.0.2.1 2>&1 || true")
    assert "unreachable" in probe["node1"][1]["stdout"]


def test_shared_cache_is_one_directory_on_every_host(rig):
    _ansible(rig, "node1", "ansible.builtin.copy", "dest=/srv/vllm-cache/marker content=from-node1")
    results = _ansible(rig, "all", "ansible.builtin.command", "cat /srv/vllm-cache/marker")
    assert {out["stdout"] for _status, out in results.values()} == {"from-node1"}


def test_gpu_less_hosts_report_zero_gpus(rig):
    results = _ansible(rig, "all", "llmserve.vllm_cluster.gpu_facts")
    for status, out in results.values():
        assert status == "SUCCESS"
        assert out["ansible_facts"]["vllm_cluster_gpus"]["gpu_count"] == 0


def test_down_removes_everything(rig, tmp_path):
    # A second rig would refuse to start over this one.
    again = subprocess.run([RIG, "up", "1"], env=rig["env"], capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode != 0 and "already up" in again.stderr
    pids = []
    for i in range(1, COUNT + 1):
        with open(os.path.join(rig["state"], "nodes", "node%d" % i, "pid")) as handle:
            pids.append(int(handle.read()))
    down = subprocess.run([RIG, "down"], env=rig["env"], capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    for pid in pids:
        assert not os.path.exists("/proc/%d" % pid), "nspawn %d still running" % pid
    assert not os.path.exists(rig["state"])
    assert subprocess.run(["ip", "link", "show", "llmsimt0"], capture_output=True, check=False).returncode != 0
