# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn ansible-runner's events and stats into one structured result. Pure: no Ansible, no I/O."""

import difflib
from dataclasses import asdict, dataclass, field

from llmserve_runbook import commands

# Which part of the stack a changed task belongs to, by role (drift names these).
ROLE_AREAS = {
    "nvidia_driver": "driver / fabric manager",
    "vllm_runtime": "vLLM / Ray runtime (venv or image)",
    "model_cache": "model revision / cache",
    "ray_cluster": "Ray unit",
    "vllm_serve": "vLLM unit",
    "loadbalancer": "load balancer",
    "nccl": "NCCL / Gloo network environment",
    "firewall": "firewall",
    "preflight": "preflight",
    "upgrade": "live record (/var/lib/vllm-cluster/live.json)",
}
STAT_KEYS = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable", "skipped": "skipped",
             "rescued": "rescued", "ignored": "ignored"}
DIFF_LIMIT = 4000


@dataclass
class Result:
    command: str
    status: str
    rc: int
    exit_code: int
    exit_meaning: str
    hosts: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    changes: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    verdict: str = ""
    report: str = ""
    artifacts_dir: str = ""
    runner_dir: str = ""
    seconds: float = 0.0

    def as_dict(self):
        return asdict(self)


def host_stats(stats):
    """{host: {ok, changed, failed, unreachable, ...}} from runner.stats."""
    hosts = {}
    for key, name in STAT_KEYS.items():
        for host, count in ((stats or {}).get(key) or {}).items():
            hosts.setdefault(host, {value: 0 for value in STAT_KEYS.values()})[name] = count
    return hosts


def role_area(role):
    short = (role or "").rsplit(".", 1)[-1]
    return ROLE_AREAS.get(short, short or "playbook")


def _diff_text(diff):
    """A module's diff (one dict or a list of them) as unified diff text, cut at DIFF_LIMIT."""
    parts = []
    for entry in diff if isinstance(diff, list) else [diff]:
        if not isinstance(entry, dict):
            continue
        if "prepared" in entry:
            parts.append(str(entry["prepared"]))
            continue
        before, after = entry.get("before"), entry.get("after")
        if before is None and after is None:
            continue
        before = before if isinstance(before, str) else "%s\n" % (before,)
        after = after if isinstance(after, str) else "%s\n" % (after,)
        parts.append("".join(difflib.unified_diff(
            before.splitlines(True), after.splitlines(True),
            str(entry.get("before_header", "before")), str(entry.get("after_header", "after")))))
    text = "\n".join(part for part in parts if part)
    return text if len(text) <= DIFF_LIMIT else text[:DIFF_LIMIT] + "\n[... cut at %d characters]" % DIFF_LIMIT


def _message(res):
    if res.get("_ansible_no_log"):
        return "(output hidden: no_log)"
    for key in ("msg", "stderr", "module_stderr", "reason"):
        if res.get(key):
            return str(res[key]).strip()[-2000:]
    return ""


def summarize_events(events, command):
    """Failures, changes and the command's result facts from runner events, in order."""
    failures, changes, outputs = [], [], {}
    for event in events:
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        kind = event.get("event")
        where = {"host": data.get("host", ""), "task": data.get("task", ""), "role": data.get("role", "")}
        if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            failures.append(dict(where, unreachable=kind == "runner_on_unreachable", message=_message(res)))
        elif kind == "runner_on_ok":
            for name in command.result_facts:
                if name in (res.get("ansible_facts") or {}):
                    outputs[name] = res["ansible_facts"][name]
            if res.get("changed"):
                change = dict(where, area=role_area(data.get("role")))
                if res.get("diff"):
                    change["diff"] = _diff_text(res["diff"])
                changes.append(change)
    return failures, changes, outputs


def exit_code(command, status, hosts, failures, changes, outputs):
    """The documented exit code (commands.EXIT_CODES) for one finished run."""
    if status in ("timeout", "canceled"):
        return commands.EXIT_TIMEOUT
    report = outputs.get("acceptance_verdict") or {}
    upgrade = outputs.get("upgrade_record") or {}
    rolled_back = upgrade.get("outcome") == "rolled_back" or outputs.get("rolling_restart_rollback")
    if rolled_back or report.get("verdict") == "fail":
        return commands.EXIT_GATE
    if any(host["failed"] for host in hosts.values()) or any(not failure["unreachable"] for failure in failures):
        return commands.EXIT_FAILED
    if any(host["unreachable"] for host in hosts.values()) or failures:
        return commands.EXIT_UNREACHABLE
    if status != "successful":
        return commands.EXIT_FAILED
    if command.reports_changes and changes:
        return commands.EXIT_DRIFT
    return commands.EXIT_OK


def build(name, status, rc, stats, events, seconds=0.0, artifacts_dir="", runner_dir=""):
    command = commands.COMMANDS[name]
    hosts = host_stats(stats)
    failures, changes, outputs = summarize_events(events, command)
    code = exit_code(command, status, hosts, failures, changes, outputs)
    report = outputs.get("acceptance_verdict") or {}
    return Result(command=name, status=status, rc=rc, exit_code=code, exit_meaning=commands.EXIT_CODES[code],
                  hosts=hosts, failures=failures, changes=changes if command.reports_changes else changes[:200],
                  outputs=outputs, verdict=(outputs.get("upgrade_record") or {}).get("outcome") or report.get("verdict", ""),
                  report=(report.get("files") or {}).get("json", ""), artifacts_dir=artifacts_dir,
                  runner_dir=runner_dir, seconds=round(seconds, 1))
