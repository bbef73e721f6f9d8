# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one command's playbook through ansible-runner and build its Result."""

import glob
import json
import os
import sys
import time

import ansible_runner

from llmserve_runbook import commands, result

# The collection checkout this package lives in: its ansible.cfg resolves llmserve.vllm_cluster.* to it.
DEFAULT_PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class UsageError(ValueError):
    """Bad arguments, found before Ansible runs (exit code 5)."""


def check_inputs(name, inventory, project_dir):
    if name not in commands.COMMANDS:
        raise UsageError("unknown command %r: use one of %s" % (name, ", ".join(sorted(commands.COMMANDS))))
    playbook = os.path.join(project_dir, commands.COMMANDS[name].playbook)
    if not os.path.isfile(playbook):
        raise UsageError("%s: no playbook at %s (project_dir must be the collection checkout)" % (name, playbook))
    if not inventory or not os.path.exists(inventory):
        raise UsageError("inventory %r does not exist: pass -i with an inventory file or directory" % (inventory,))
    return playbook


def write_private_extravars(runner_dir, extravars):
    """The extra vars as runner_dir/env/extravars, readable by this user alone; returns its path."""
    os.makedirs(os.path.join(runner_dir, "env"), mode=0o700, exist_ok=True)
    path = os.path.join(runner_dir, "env", "extravars")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        json.dump(extravars, handle)
    return path


def keep_env_names_only(runner_dir):
    """ansible-runner's artifacts/<ident>/command records the caller's whole environment (an exported HF_TOKEN,
    say): keep the names of its variables, not their values."""
    for path in glob.glob(os.path.join(runner_dir, "artifacts", "*", "command")):
        with open(path) as handle:
            record = json.load(handle)
        record["env"] = sorted(record.get("env") or {})
        with open(path, "w") as handle:
            json.dump(record, handle)


def run(name, inventory, extravars=None, project_dir=DEFAULT_PROJECT, artifacts_dir="artifacts", limit=None,
        tags=None, timeout=None, on_event=None, verbosity=0):
    """Run command `name` against `inventory`; returns a result.Result (never raises for a failed play).

    on_event(event) sees every ansible-runner event as it happens (progress streaming).
    """
    playbook = check_inputs(name, inventory, project_dir)
    command = commands.COMMANDS[name]
    artifacts_dir = os.path.abspath(artifacts_dir)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    runner_dir = os.path.join(artifacts_dir, "runbook", "%s-%s-%d" % (name, stamp, os.getpid()))
    # The caller's user alone: while the run lasts, ansible-runner's artifacts hold the caller's environment.
    os.makedirs(runner_dir, mode=0o700, exist_ok=True)
    # Playbooks write their reports under vllm_cluster_artifacts_dir; default it to ours so the result can name them.
    extravars = dict({"vllm_cluster_artifacts_dir": artifacts_dir}, **dict(command.extravars), **(extravars or {}))
    cmdline = list(command.cmdline) + (["--tags", ",".join(tags)] if tags else [])
    envvars = {
        "ANSIBLE_CONFIG": os.path.join(project_dir, "ansible.cfg"),
        # ansible-playbook from the same environment as this package, whatever PATH the caller has.
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_INJECT_FACT_VARS": "False",
    }
    started = time.monotonic()
    # ansible-runner puts a dict of extra vars on ansible-playbook's command line (every process on the controller
    # can read it) and in the artifacts' command file; env/extravars is passed as -e @file instead.
    extravars_file = write_private_extravars(runner_dir, extravars)
    try:
        runner = ansible_runner.run(
            private_data_dir=runner_dir, project_dir=project_dir, playbook=playbook,
            inventory=os.path.abspath(inventory), envvars=envvars,
            cmdline=" ".join(cmdline) or None, limit=limit, verbosity=verbosity or None,
            timeout=timeout, quiet=True, suppress_env_files=True,
            event_handler=(lambda event: bool(on_event(event)) or True) if on_event else None)
    finally:
        os.unlink(extravars_file)
        keep_env_names_only(runner_dir)
    return result.build(name, runner.status, runner.rc, runner.stats, list(runner.events),
                        seconds=time.monotonic() - started, artifacts_dir=artifacts_dir, runner_dir=runner_dir)
