"""Reach the simulated cluster the way its inventory does (tests/sim/rig.sh wrote it)."""

import os
import subprocess
import sys

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
