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


# --- each host has its own cgroup subtree (issue 27) -------------------------------------------------------------

def _ssh(rig, index, command):
    """argv of an ssh to host INDEX of the test rig, as root with the rig's key."""
    state = rig["state"]
    return ["ssh", "-q", "-i", os.path.join(state, "id_ed25519"), "-o", "UserKnownHostsFile=%s/known_hosts" % state,
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "root@10.213.8.%d" % (10 + index), command]


def _on(rig, index, command, check=True):
    run = subprocess.run(_ssh(rig, index, command), capture_output=True, text=True, timeout=60, check=False)
    assert not check or run.returncode == 0, "node%d: %s: %s" % (index, command, run.stderr)
    return run


def _unified_cgroup(pid):
    """The cgroup of a host PID in the unified hierarchy, as the host sees it."""
    with open("/proc/%d/cgroup" % pid) as handle:
        return next(line.strip()[3:] for line in handle if line.startswith("0::"))


def _container_init(rig, index):
    """Host PID of the container's PID 1 (systemd): the descendant of the host's nspawn named systemd."""
    with open(os.path.join(rig["state"], "nodes", "node%d" % index, "pid")) as handle:
        todo = [int(handle.read())]
    while todo:
        pid = todo.pop(0)
        with open("/proc/%d/comm" % pid) as handle:
            if handle.read().strip() == "systemd":
                return pid
        with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
            todo += [int(child) for child in handle.read().split()]
    raise AssertionError("node%d: no systemd under its nspawn" % index)


def _unified_root():
    return "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.procs") else "/sys/fs/cgroup/unified"


def test_each_host_has_its_own_cgroup_directory(rig):
    paths = {index: _unified_cgroup(_container_init(rig, index)) for index in range(1, COUNT + 1)}
    assert len(set(paths.values())) == COUNT, paths
    for index, path in paths.items():
        assert "/node%d/" % index in path + "/", paths
        assert os.path.isdir(_unified_root() + path), path
    # Inside, PID 1 sees the payload as its root (a cgroup namespace): systemd there owns the whole tree it sees.
    assert _on(rig, 1, "cat /proc/1/cgroup").stdout.strip().endswith("0::/init.scope")


def test_same_named_unit_on_two_hosts_is_two_cgroups(rig):
    start = "systemctl reset-failed llmsim-twin 2>/dev/null; systemd-run --quiet --unit=llmsim-twin sleep 600"
    show = "systemctl show --property=ActiveState --property=MainPID llmsim-twin | sort"
    try:
        for index in (1, 2):
            _on(rig, index, start)
        before = _on(rig, 1, show).stdout.split()
        assert before[0] == "ActiveState=active" and before[1] != "MainPID=0", before
        kill = _on(rig, 2, "systemctl kill --signal=SIGKILL llmsim-twin")
        assert "auxiliary" not in kill.stderr, kill.stderr
        assert _on(rig, 1, show).stdout.split() == before, "SIGKILL of node2's unit touched node1's"
        assert _on(rig, 2, "systemctl is-active llmsim-twin", check=False).stdout.strip() != "active"
        # And the other way round with a stop.
        _on(rig, 2, start)
        _on(rig, 1, "systemctl stop llmsim-twin")
        assert _on(rig, 2, show).stdout.split()[0] == "ActiveState=active", "stopping node1's unit stopped node2's"
    finally:
        for index in (1, 2):
            _on(rig, index, "systemctl stop llmsim-twin; systemctl reset-failed llmsim-twin", check=False)


def test_a_oneshot_on_every_host_at_once_starts_20_times_in_a_row(rig):
    command = ("systemd-run --quiet --wait --unit=llmsim-once --property=Type=oneshot "
               "--property=CollectMode=inactive-or-failed /bin/true")
    for attempt in range(20):
        procs = [subprocess.Popen(_ssh(rig, index, command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for index in range(1, COUNT + 1)]
        outcomes = [(proc.wait(timeout=60), proc.stdout.read()) for proc in procs]
        assert all(code == 0 for code, _output in outcomes), "attempt %d: %s" % (attempt + 1, outcomes)


def test_a_second_rig_is_refused_while_a_previous_ones_cgroups_remain(rig):
    # Another state dir but the same bridge (and so the same cgroup subtree): the leftovers are named.
    env = dict(rig["env"], LLMSERVE_SIM_STATE="/run/llmserve-sim-test-other")
    again = subprocess.run([RIG, "up", "1"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode != 0 and "llmsim-llmsimt0" in again.stderr and "down" in again.stderr, again.stderr
    assert not os.path.exists("/run/llmserve-sim-test-other/nodes")


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
    assert not os.path.exists(os.path.join(_unified_root(), "llmsim-llmsimt0"))
    assert not os.path.exists("/sys/fs/cgroup/systemd/llmsim-llmsimt0")
