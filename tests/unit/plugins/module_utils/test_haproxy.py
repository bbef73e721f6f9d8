"""HAProxy runtime API answers, parsed: captured from HAProxy 2.6 (Debian 12) on loopback."""

import os

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _haproxy as h

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "haproxy")


def read(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def test_servers_state_reads_drain_and_ready():
    text = read("show-servers-state-r0-drain.txt")
    assert h.parse_servers_state(text, "vllm_replicas", "r0") == {"admin": "drain", "admin_bits": 8, "op": "stopped"}
    assert h.parse_servers_state(text, "vllm_replicas", "r1")["admin"] == "ready"


def test_servers_state_names_a_missing_server():
    with pytest.raises(h.HaproxyError, match="no server r9 in backend vllm_replicas"):
        h.parse_servers_state(read("show-servers-state-r0-drain.txt"), "vllm_replicas", "r9")


@pytest.mark.parametrize("bits, name", [(0, "ready"), (0x08, "drain"), (0x10, "drain"), (0x01, "maint"),
                                        (0x01 | 0x08, "maint"), (0x20, "maint")])
def test_admin_bits(bits, name):
    assert h.admin_name(bits) == name


def test_stat_reads_sessions_and_status():
    text = read("show-stat-down.txt")
    assert h.parse_stat(text, "vllm_replicas", "r0") == {"sessions": 0, "queued": 0, "status": "DOWN"}
    with pytest.raises(h.HaproxyError):
        h.parse_stat(text, "vllm_replicas", "nope")
    with pytest.raises(h.HaproxyError, match="unexpected answer"):
        h.parse_stat("Unknown command\n", "vllm_replicas", "r0")


def test_set_state_command_and_answers():
    assert h.set_state_command("vllm_replicas", "r0", "drain") == "set server vllm_replicas/r0 state drain"
    with pytest.raises(h.HaproxyError):
        h.set_state_command("vllm_replicas", "r0", "up")
    h.check_answer("set server b/s state ready", "\n")
    with pytest.raises(h.HaproxyError, match="No such server"):
        h.check_answer("set server b/nope state ready", "No such server.\n")
