# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runbook's commands: which playbook each runs, how, and which facts it hands back."""

from dataclasses import dataclass, field

# Documented in README.md ("Runbook automation"); a caller branches on these, so they never change meaning.
EXIT_CODES = {
    0: "ok: every host succeeded (drift: nothing differs)",
    1: "failed: a task failed on a host, or the playbook could not run",
    2: "unreachable: a host could not be reached (and nothing failed otherwise)",
    3: "gate: the acceptance verdict is fail, an upgrade rolled back to its previous pins, or a deploy's rollout put a replica back on its previous files",
    4: "drift: the hosts differ from the inventory's pins (nothing was changed)",
    5: "usage: bad arguments (inventory, extra vars), before Ansible ran",
    6: "timeout: the run was stopped at --timeout, or canceled",
}
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_GATE, EXIT_DRIFT, EXIT_USAGE, EXIT_TIMEOUT = range(7)


@dataclass(frozen=True)
class Command:
    playbook: str
    summary: str
    cmdline: tuple = ()
    # set_fact names whose last value the result carries as outputs[name].
    result_facts: tuple = field(default_factory=tuple)
    # Drift: changes are findings, not actions.
    reports_changes: bool = False
    # Extra vars the command always passes (the caller's -e still wins).
    extravars: tuple = ()


COMMANDS = {
    "deploy": Command("playbooks/deploy.yml", "bare hosts to a load-balanced vLLM service",
                      result_facts=("deploy_record", "deploy_restarts", "rolling_restart_record",
                                    "rolling_restart_rollback")),
    "acceptance": Command("playbooks/acceptance.yml", "the staged acceptance test and its report",
                          result_facts=("acceptance_verdict",)),
    "rolling-restart": Command("playbooks/rolling_restart.yml", "restart one replica at a time, drained first",
                               result_facts=("rolling_restart_record",)),
    "upgrade": Command("playbooks/upgrade.yml", "new vLLM version or model revision, canary first, automatic rollback",
                       result_facts=("upgrade_record", "acceptance_verdict")),
    # A check run changes nothing, so a driver that differs from the pin is reported as drift, not refused.
    "drift": Command("playbooks/deploy.yml", "what differs from the pins, changing nothing (deploy.yml --check --diff)",
                     cmdline=("--check", "--diff"), reports_changes=True, result_facts=("deploy_restarts",),
                     extravars=(("nvidia_driver_allow_change", True),)),
    "collect": Command("playbooks/collect.yml", "the troubleshooting evidence in one archive with a summary",
                       result_facts=("collect_bundle",)),
}
