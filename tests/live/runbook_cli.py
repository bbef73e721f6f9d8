"""Drive the live sim through the runbook package's console script (ansible-runner underneath)."""

import json
import os
import subprocess
import sys

from sim_hosts import INVENTORY, REPO, ansible_env

ARTIFACTS = os.path.join(REPO, "artifacts")


def runbook(command, *args, timeout=2400, env=None):
    """Run `llmserve-runbook COMMAND -i <sim inventory> ARGS`; returns (result dict, progress text). env: variables
    on top of the tests' Ansible environment."""
    cli = os.path.join(os.path.dirname(sys.executable), "llmserve-runbook")
    run = subprocess.run([cli, command, "-i", INVENTORY, "--artifacts-dir", ARTIFACTS, *args], env=dict(ansible_env(), **(env or {})),
                         capture_output=True, text=True, timeout=timeout, check=False)
    assert run.stdout.strip(), "no result from llmserve-runbook %s (rc %d): %s" % (command, run.returncode, run.stderr[-3000:])
    result = json.loads(run.stdout)
    # The documented contract: the process exits with the result's exit code.
    assert run.returncode == result["exit_code"], (run.returncode, result["exit_code"])
    return result, run.stderr


def record(name, payload):
    """Keep a figure set under artifacts/lifecycle/ and print it."""
    os.makedirs(os.path.join(ARTIFACTS, "lifecycle"), exist_ok=True)
    with open(os.path.join(ARTIFACTS, "lifecycle", "%s.json" % name), "w") as handle:
        json.dump(payload, handle, indent=1, default=str)
    print("\n%s: %s" % (name, json.dumps(payload, default=str)))
