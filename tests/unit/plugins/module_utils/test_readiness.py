"""The readiness definition: when a wait on a replica ends, on unit states as ``systemctl show`` prints them."""

import json

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _readiness as r

# systemctl show of a vLLM unit: starting, crashed and waiting out RestartSec, restarted.
STARTING = "ActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\nExecMainStatus=0\nLoadState=loaded\n"
AUTO_RESTART = "ActiveState=activating\nSubState=auto-restart\nMainPID=0\nNRestarts=0\nExecMainStatus=1\nLoadState=loaded\n"
RESTARTED = "ActiveState=active\nSubState=running\nMainPID=5151\nNRestarts=1\nExecMainStatus=0\nLoadState=loaded\n"
STOPPED = "ActiveState=inactive\nSubState=dead\nMainPID=0\nNRestarts=0\nExecMainStatus=0\nLoadState=loaded\n"
FAILED = "ActiveState=failed\nSubState=failed\nMainPID=0\nNRestarts=3\nExecMainStatus=9\nLoadState=loaded\n"


class Clock:
    """A fake monotonic clock that sleep() advances."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def run_wait(probes, units, timeout=600, interval=1.0):
    clock, probes, units = Clock(), list(probes), list(units)
    read_unit = (lambda: r.parse_unit_show(units.pop(0) if len(units) > 1 else units[0])) if units else (lambda: None)
    return r.wait(lambda: probes.pop(0) if len(probes) > 1 else probes[0], read_unit, clock, clock.sleep, timeout,
                  interval)


def test_show_output_parses_numbers():
    state = r.parse_unit_show(STARTING)
    assert state["MainPID"] == 4242 and state["NRestarts"] == 0 and state["ActiveState"] == "active"


def test_ready_on_the_first_completion_that_answers():
    result = run_wait([(False, "refused"), (False, "refused"), (True, "HTTP 200")], [STARTING])
    assert result["ready"] and result["attempts"] == 3 and result["reason"] is None and result["waited_s"] == 2.0


@pytest.mark.parametrize("later, words", [
    (AUTO_RESTART, "systemd is restarting it: its process exited (status 1)"),
    (RESTARTED, "systemd restarted it 1 time(s)"),
    (STOPPED, "its process is gone: the unit is inactive"),
    (FAILED, "its process is gone: the unit is failed"),
])
def test_a_dead_or_restarting_engine_ends_the_wait_at_the_next_attempt(later, words):
    result = run_wait([(False, "Connection refused")], [STARTING, STARTING, STARTING, later])
    assert not result["ready"] and words in result["reason"]
    # Three attempts while the unit still looked alive, then one look at the changed unit: seconds, not the timeout.
    assert result["attempts"] == 3 and result["waited_s"] == 2.0


def test_a_new_main_pid_alone_is_a_restart():
    replaced = STARTING.replace("MainPID=4242", "MainPID=4343")
    assert "main process changed (4242 -> 4343)" in run_wait([(False, "x")], [STARTING, replaced])["reason"]


def test_a_unit_crashing_before_the_wait_began_fails_at_once():
    result = run_wait([(False, "Connection refused")], [AUTO_RESTART])
    assert result["attempts"] == 1 and "restarting" in result["reason"]


def test_a_live_unit_that_never_answers_fails_at_the_timeout():
    result = run_wait([(False, "HTTP Error 503")], [STARTING], timeout=30, interval=2.0)
    assert not result["ready"] and result["reason"] == "no completion within 30 s" and result["waited_s"] == 30.0
    assert result["detail"] == "HTTP Error 503"


def test_without_a_unit_only_the_timeout_ends_the_wait():
    result = run_wait([(False, "refused")], [], timeout=5)
    assert result["reason"] == "no completion within 5 s" and result["attempts"] == 6


def test_the_completion_is_one_token_with_the_key_as_bearer():
    url, body, headers = r.completion_request("http://10.0.0.11:8000/", "tiny", "k" * 20)
    assert url == "http://10.0.0.11:8000/v1/completions"
    assert json.loads(body) == {"model": "tiny", "prompt": "ready", "max_tokens": 1}
    assert headers["Authorization"] == "Bearer " + "k" * 20
    assert "Authorization" not in r.completion_request("http://h:1", "tiny", "")[2]
