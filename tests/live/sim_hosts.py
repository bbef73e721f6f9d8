"""Reach the simulated cluster the way its inventory does (tests/sim/rig.sh wrote it)."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INVENTORY = os.path.join(REPO, "inventories", "sim")


def load_inventory():
    with open(os.path.join(INVENTORY, "hosts.yml")) as handle:
        hosts = yaml.safe_load(handle)
    with open(os.path.join(INVENTORY, "group_vars", "all.yml")) as handle:
        group_vars = yaml.safe_load(handle)
    return hosts, group_vars


def address(host):
    hosts = load_inventory()[0]
    return hosts["all"]["children"]["vllm_nodes"]["hosts"][host]["ansible_host"]


def ssh(host, command, stdin=None, timeout=120, check=True):
    """Run a shell command on a sim host as root; returns the CompletedProcess."""
    hosts = load_inventory()[0]
    common = hosts["all"]["vars"]["ansible_ssh_common_args"].split()
    argv = ["ssh", "-q", "-i", hosts["all"]["vars"]["ansible_ssh_private_key_file"], *common,
            "-o", "BatchMode=yes", "root@%s" % address(host), command]
    run = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and run.returncode != 0:
        raise AssertionError("%s: %s failed (%d): %s" % (host, command, run.returncode, run.stderr[-2000:]))
    return run


def playbook_argv(playbook, inventory=INVENTORY, *args):
    """ansible-playbook from the Python running the tests (the pinned venv)."""
    return [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook, "-i", str(inventory), *args]


def ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_CALLBACK_RESULT_FORMAT="json")


def mitogen_env():
    """What `source scripts/mitogen-env.sh` exports, from the script itself (the one place that says how Mitogen is
    turned on), with this Python's venv first on PATH as the script expects."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    run = subprocess.run(["bash", "-c", "source scripts/mitogen-env.sh && env"], cwd=REPO, env=dict(os.environ, PATH=path),
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return dict(line.split("=", 1) for line in run.stdout.splitlines() if line.startswith("ANSIBLE_STRATEGY"))


def recap(stdout):
    """PLAY RECAP lines as {host: {ok: n, changed: n, ...}}."""
    counts, seen = {}, False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            seen = True
            continue
        if seen and ":" in line and "=" in line:
            host, rest = line.split(":", 1)
            counts[host.strip()] = {key: int(value) for key, value in (item.split("=") for item in rest.split())}
    return counts


def load_balancer():
    return sorted(load_inventory()[0]["all"]["children"]["vllm_loadbalancers"]["hosts"])[0]


class SteadyClient:
    """Workers sending short completions through HAProxy (back to back, or ``pause`` seconds apart); every request
    is recorded."""

    def __init__(self, workers=2, pause=0.0):
        self.url = "http://%s:8080/v1/completions" % address(load_balancer())
        group_vars = load_inventory()[1]
        self.body = json.dumps({"model": group_vars["vllm_cluster_model"]["served_name"], "prompt": "hello",
                                "max_tokens": 8}).encode()
        self.headers = {"Authorization": "Bearer " + group_vars["vllm_cluster_api_key"],
                        "Content-Type": "application/json"}
        self.records, self.stop, self.pause = [], threading.Event(), pause
        self.threads = [threading.Thread(target=self._run, daemon=True) for worker in range(workers)]

    def _run(self):
        while not self.stop.is_set():
            start, error = time.monotonic(), None
            try:
                urllib.request.urlopen(urllib.request.Request(self.url, self.body, self.headers), timeout=120).read()
            except (urllib.error.URLError, OSError) as exc:
                error = str(exc)[:200]
                time.sleep(0.5)
            self.records.append({"start": start, "end": time.monotonic(), "error": error})
            self.stop.wait(self.pause)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        time.sleep(3)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(150)

    def account(self, fault):
        """Requests, failures, those in flight at the fault, and failures that started after it (lost).

        ``fault`` is (before, after): the fault command was sent at ``before`` and had returned at ``after``."""
        before, after = fault
        in_flight = [r for r in self.records if r["start"] <= after and r["end"] >= before]
        failed = [r for r in self.records if r["error"]]
        lost = [r for r in failed if r["start"] > after]
        return {"requests": len(self.records), "failed": len(failed), "in_flight_at_fault": len(in_flight),
                "failed_after_fault": len(lost), "errors": sorted({r["error"] for r in failed})[:5],
                "failures_started_s_after_fault": [round(r["start"] - after, 2) for r in failed]}


# The sim's replicas and the hosts their ranks run on (inventories/sim: r0 spans node1 and node2).
REPLICA_HOSTS = {"r0": ["node1", "node2"], "r1": ["node3"]}


def main_pids():
    """Each replica rank's vLLM main PID as {"r0@node1": "1234", ...}: a changed PID is a restart."""
    return {"%s@%s" % (replica, host): ssh(host, "systemctl show --property MainPID --value vllm-%s.service" % replica).stdout.strip()
            for replica, hosts in REPLICA_HOSTS.items() for host in hosts}


def wait_until_serving(timeout=600):
    """Until every replica is UP in HAProxy: a test that restarts replicas starts from a serving cluster."""
    deadline = time.monotonic() + timeout
    while not all(haproxy_status(name) == "UP" for name in REPLICA_HOSTS):
        assert time.monotonic() < deadline, "replicas not UP before the test"
        time.sleep(2)


def haproxy_status(replica):
    """The replica's status column in HAProxy's stats (UP, DOWN, DRAIN, MAINT, ...)."""
    csv = ssh(load_balancer(), "curl -s 'http://127.0.0.1:8404/stats;csv'").stdout
    for line in csv.splitlines():
        fields = line.split(",")
        if len(fields) > 17 and fields[0] == "vllm_replicas" and fields[1] == replica:
            return fields[17]
    return "missing"
