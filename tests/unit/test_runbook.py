"""The runbook package's pure parts: results from ansible-runner events, exit codes, extra vars, usage errors."""

import glob
import json
import os
import stat
import sys

import pytest

from llmserve_runbook import cli, commands, result, runner


def event(kind, host="node1", task="t", role="", **res):
    return {"event": kind, "event_data": {"host": host, "task": task, "role": role, "res": res}}


STATS_OK = {"ok": {"node1": 5, "node2": 4}, "changed": {"node1": 1}, "failures": {}, "dark": {}, "skipped": {"node2": 2}}


def test_hosts_get_every_count():
    hosts = result.host_stats(STATS_OK)
    assert hosts["node1"] == {"ok": 5, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 0, "rescued": 0, "ignored": 0}
    assert hosts["node2"]["skipped"] == 2


def test_drift_lists_changes_by_area_with_diffs_and_exits_4():
    events = [event("runner_on_ok", task="Install vLLM", role="llmserve.vllm_cluster.vllm_runtime", changed=True),
              event("runner_on_ok", task="Write the unit", role="vllm_serve", changed=True,
                    diff=[{"before": "a\nrevision=1\n", "after": "a\nrevision=2\n", "before_header": "/etc/x", "after_header": "/etc/x"}]),
              event("runner_on_ok", task="Read", role="preflight", changed=False)]
    built = result.build("drift", "successful", 0, STATS_OK, events)
    assert built.exit_code == commands.EXIT_DRIFT == 4
    assert [change["area"] for change in built.changes] == ["vLLM / Ray runtime (venv or image)", "vLLM unit"]
    assert "-revision=1\n+revision=2" in built.changes[1]["diff"]
    assert result.build("drift", "successful", 0, STATS_OK, events[2:]).exit_code == 0


def test_failures_unreachable_timeouts_and_gates():
    failed = [event("runner_on_failed", task="Check", msg="tp*pp is 4 but node2 has 1 GPU")]
    built = result.build("deploy", "failed", 2, dict(STATS_OK, failures={"node1": 1}), failed)
    assert built.exit_code == 1 and built.failures[0]["message"] == "tp*pp is 4 but node2 has 1 GPU"
    dark = [event("runner_on_unreachable", msg="ssh: connect to host 10.0.0.9 port 22: No route")]
    assert result.build("deploy", "failed", 4, dict(STATS_OK, dark={"node1": 1}), dark).exit_code == 2
    assert result.build("deploy", "timeout", 254, STATS_OK, []).exit_code == 6
    ignored = [dict(event("runner_on_failed", msg="probe"), event_data={"ignore_errors": True, "res": {}})]
    assert result.build("collect", "successful", 0, STATS_OK, ignored).exit_code == 0


def test_no_log_failures_stay_hidden():
    hidden = [event("runner_on_failed", msg="secret", _ansible_no_log=True)]
    built = result.build("deploy", "failed", 2, dict(STATS_OK, failures={"node1": 1}), hidden)
    assert built.failures[0]["message"] == "(output hidden: no_log)"


def test_acceptance_verdict_and_upgrade_rollback_are_gates():
    report = {"verdict": "fail", "files": {"json": "/a/report.json"}}
    events = [event("runner_on_ok", task="Keep the report", ansible_facts={"acceptance_verdict": report}),
              event("runner_on_failed", task="Fail on a gate", msg="acceptance failed its gates")]
    built = result.build("acceptance", "failed", 2, dict(STATS_OK, failures={"node1": 1}), events)
    assert (built.exit_code, built.verdict, built.report) == (3, "fail", "/a/report.json")
    passed = [event("runner_on_ok", ansible_facts={"acceptance_verdict": {"verdict": "pass", "files": {"json": "/r.json"}}})]
    assert result.build("acceptance", "successful", 0, STATS_OK, passed).exit_code == 0
    rolled = [event("runner_on_ok", ansible_facts={"acceptance_verdict": {"verdict": "fail", "files": {}}}),
              event("runner_on_ok", ansible_facts={"upgrade_record": {"outcome": "rolled_back"}})]
    built = result.build("upgrade", "successful", 0, STATS_OK, rolled)
    assert built.exit_code == 3 and built.verdict == "rolled_back"
    put_back = [event("runner_on_ok", ansible_facts={"rolling_restart_rollback": {"replica": "r0", "serves_again": True}}),
                event("runner_on_failed", task="Stop the roll at r0", msg="r0 failed its gate")]
    built = result.build("deploy", "failed", 2, dict(STATS_OK, failures={"lb1": 1}), put_back)
    assert built.exit_code == 3 and built.outputs["rolling_restart_rollback"]["replica"] == "r0"


def test_extra_vars_forms(tmp_path):
    varfile = tmp_path / "v.yml"
    varfile.write_text("a: 1\nb: [x]\n")
    merged = cli.parse_extra_vars(["@%s" % varfile, "c=true", 'd={"k": 2}', '{"e": "f"}', "g="])
    assert merged == {"a": 1, "b": ["x"], "c": True, "d": {"k": 2}, "e": "f", "g": ""}
    for bad in ("novalue", "@%s" % (tmp_path / "missing.yml"), "[1, 2]"):
        with pytest.raises(runner.UsageError):
            cli.parse_extra_vars([bad])


def test_usage_errors_exit_5_before_ansible(tmp_path, capsys):
    assert cli.main(["deploy", "-i", str(tmp_path / "nope")]) == 5
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == 5 and "does not exist" in out["error"]
    with pytest.raises(runner.UsageError, match="no playbook"):
        runner.check_inputs("deploy", str(tmp_path), str(tmp_path))


def test_every_command_names_an_existing_playbook():
    for name, command in commands.COMMANDS.items():
        runner.check_inputs(name, runner.DEFAULT_PROJECT, runner.DEFAULT_PROJECT)
        assert command.summary
    assert sorted(commands.EXIT_CODES) == list(range(7))


def test_extra_vars_reach_the_play_through_a_private_file_not_the_command_line(tmp_path, monkeypatch):
    # A real ansible-runner run of a stand-in project: ansible-runner puts a dict of extra vars on ansible-playbook's
    # command line (readable by every process on the controller) and in the artifacts' command file.
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "ansible.cfg").write_text("[defaults]\n")
    out = tmp_path / "out.txt"
    (project / "playbooks" / "deploy.yml").write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.copy: {content: '{{ probe_secret }}', dest: '%s', mode: '0600'}\n" % out)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_python_interpreter=%s\n" % sys.executable)
    artifacts = tmp_path / "artifacts"
    monkeypatch.setenv("LLMSERVE_PROBE_EXPORTED", "exported-VALUE")
    modes = []

    def look(_event):
        for path in glob.glob(str(artifacts / "runbook" / "*" / "env" / "extravars")):
            modes.append(stat.S_IMODE(os.stat(path).st_mode))

    built = runner.run("deploy", str(inventory), extravars={"probe_secret": "s3cr3t-VALUE"}, project_dir=str(project),
                       artifacts_dir=str(artifacts), on_event=look)
    assert built.exit_code == 0, built.failures
    assert out.read_text() == "s3cr3t-VALUE"
    assert modes and set(modes) == {0o600}
    assert not glob.glob(str(artifacts / "runbook" / "*" / "env" / "extravars")), "the file outlived the run"
    assert stat.S_IMODE(os.stat(built.runner_dir).st_mode) == 0o700
    commands_ = glob.glob(os.path.join(built.runner_dir, "artifacts", "*", "command"))
    with open(commands_[0]) as handle:
        assert "LLMSERVE_PROBE_EXPORTED" in json.load(handle)["env"]
    for path in glob.glob(str(artifacts / "**"), recursive=True):
        if os.path.isfile(path):
            with open(path, errors="replace") as handle:
                text = handle.read()
            assert "s3cr3t-VALUE" not in text and "exported-VALUE" not in text, path
