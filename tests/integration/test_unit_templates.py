"""The vLLM and Ray units as the roles render them, for the venv and container runtimes and the mp and
Ray executors, parsed back into argv: what systemd would execute on each host."""

import json
import os
import shlex
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REPLAY = os.path.join(REPO, "tests", "fixtures", "bin", "nvidia-smi-replay")
H200 = os.path.join(REPO, "tests", "fixtures", "gpu", "h200-1gpu-vm")
H200_UUID = "GPU-610d5b85-56af-75c3-d325-d948d8316c99"
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
IMAGE = "registry.internal/vllm/vllm-openai@sha256:" + "ab" * 32
# The controller's own Python: the hosts here are the controller itself.
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
BASE = {
    "vllm_serve_model_path": "/srv/vllm-cache/models/m/" + "c" * 40,
    "vllm_serve_served_name": "m", "vllm_serve_revision": "c" * 40,
    "vllm_serve_api_key": "k" * 20, "vllm_serve_hosts": ["a", "b"], "vllm_serve_replica": "r0",
    "vllm_serve_ray_address": "10.0.0.11:6379", "ray_cluster_version": "2.60.0",
}


def _render(tmp_path, extra):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"vars": LOCAL, "children": {"vllm_nodes": {"hosts": {
        "a": {"ansible_host": "10.0.0.11"}, "b": {"ansible_host": "10.0.0.12"}}}}}}))
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps(dict(BASE, repo=REPO, render_dir=str(tmp_path), **extra)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    # A replica on host a alone renders a's units only.
    limit = ["--limit", ",".join(extra["vllm_serve_hosts"])] if "vllm_serve_hosts" in extra else []
    run = subprocess.run([shutil.which("ansible-playbook"), "-i", str(inventory), "-e", "@%s" % variables] + limit +
                         [os.path.join(REPO, "tests", "integration", "units", "render.yml")],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {name: (tmp_path / name).read_text() for name in os.listdir(tmp_path) if name.endswith((".service", ".env"))}


def _settings(unit, key):
    return [line.split("=", 1)[1] for line in unit.split("\n") if line.startswith(key + "=")]


def _replay(tmp_path):
    """HARDWARE STAND-IN: a bin directory whose nvidia-smi replays the real H200 capture."""
    bindir = tmp_path / "replay-bin"
    bindir.mkdir()
    shutil.copy(REPLAY, bindir / "nvidia-smi")
    return {"replay_bin": str(bindir), "replay_fixture": H200}


def _exec_start(unit):
    lines = unit.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    text = ""
    for line in lines[start:]:
        text += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            break
    return shlex.split(text[len("ExecStart="):])


def test_venv_mp_spanning_two_hosts(tmp_path):
    units = _render(tmp_path, {"vllm_serve_multinode_backend": "mp"})
    rank0, rank1 = _exec_start(units["a-vllm.service"]), _exec_start(units["b-vllm.service"])
    assert rank0[:2] == ["/opt/vllm/current/bin/vllm", "serve"]
    assert "--headless" not in rank0 and rank0[rank0.index("--host") + 1] == "10.0.0.11"
    assert "--headless" in rank1 and "--host" not in rank1
    for argv, rank in ((rank0, "0"), (rank1, "1")):
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.11"
        assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"
        assert argv[argv.index("--revision") + 1] == "c" * 40
    assert "User=vllm" in units["a-vllm.service"] and "ProtectSystem=strict" in units["a-vllm.service"]
    assert "k" * 20 not in units["a-vllm.service"]
    head, worker = _exec_start(units["a-ray.service"]), _exec_start(units["b-ray.service"])
    assert head[:3] == ["/opt/vllm/current/bin/ray", "start", "--block"] and "--head" in head
    assert "--dashboard-host=127.0.0.1" in head
    assert "--address=10.0.0.11:6379" in worker and "--head" not in worker


def test_container_ray_backend(tmp_path):
    units = _render(tmp_path, {"vllm_serve_runtime": "container", "vllm_serve_image": IMAGE,
                               "ray_cluster_runtime": "container", "ray_cluster_image": IMAGE,
                               "vllm_serve_multinode_backend": "ray"})
    argv = _exec_start(units["a-vllm.service"])
    assert argv[:3] == ["/usr/bin/podman", "run", "--rm"]
    image_at = argv.index(IMAGE)
    assert argv[image_at - 1] == "--entrypoint=vllm" and argv[image_at + 1:image_at + 3] == ["serve", BASE["vllm_serve_model_path"]]
    assert "--device=nvidia.com/gpu=all" in argv and "--network=host" in argv
    assert "--volume=%s:%s:ro" % ((BASE["vllm_serve_model_path"],) * 2) in argv
    assert "--volume=/var/lib/ray:/var/lib/ray" in argv
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert "--env-file=/etc/vllm/r0.env" in argv and "k" * 20 not in units["a-vllm.service"]
    # With Ray only the first host runs vLLM; the second lends its GPUs through its Ray worker.
    head = _exec_start(units["a-ray.service"])
    assert head[:2] == ["/usr/bin/podman", "run"] and head[head.index(IMAGE) - 1] == "--entrypoint=ray"
    assert head[head.index(IMAGE) + 1:head.index(IMAGE) + 3] == ["start", "--block"]


def _preflight_refuses(tmp_path, extra, tasks_from="preflight.yml"):
    """Run vllm_serve's preflight for host a alone; return its output, which must be a refusal."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"vars": LOCAL, "hosts": {"a": {"ansible_host": "10.0.0.11"}}}}))
    variables = dict(BASE, vllm_serve_hosts=["a"], **extra)
    cmd = [shutil.which("ansible"), "a", "-i", str(inventory), "-c", "local", "-m", "ansible.builtin.include_role",
           "-a", "name=llmserve.vllm_cluster.vllm_serve tasks_from=%s" % tasks_from, "-e", json.dumps(variables)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0
    return run.stdout + run.stderr


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.32.0", "vllm/vllm-openai@sha256:abc", ""])
def test_container_mode_refuses_an_image_without_a_digest(tmp_path, image):
    assert "name@sha256:<64 hex>" in _preflight_refuses(tmp_path, {"vllm_serve_runtime": "container",
                                                                   "vllm_serve_image": image})


def test_each_replica_unit_owns_exactly_its_gpus(tmp_path):
    units = _render(tmp_path, {"vllm_serve_hosts": ["a"], "vllm_serve_gpus": [4, 5, 6, 7],
                               "vllm_serve_tensor_parallel_size": 4})
    unit = units["a-vllm.service"]
    # No GPU facts for this host: indices, read in nvidia-smi's (PCI bus) order.
    assert _settings(unit, "Environment")[-2:] == ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=4,5,6,7"]
    assert _settings(unit, "DevicePolicy") == ["closed"]
    assert _settings(unit, "DeviceAllow") == ["/dev/nvidia%d rw" % i for i in (4, 5, 6, 7)] + [d + " rw" for d in CONTROL]
    assert _exec_start(unit)[_exec_start(unit).index("--tensor-parallel-size") + 1] == "4"


def test_units_name_gpus_by_uuid_from_the_hosts_facts(tmp_path):
    units = _render(tmp_path, dict(_replay(tmp_path), vllm_serve_hosts=["a"], vllm_serve_gpus=[0], ray_cluster_gpus=[0]))
    assert "CUDA_VISIBLE_DEVICES=" + H200_UUID in _settings(units["a-vllm.service"], "Environment")
    ray = units["a-ray.service"]
    assert "CUDA_VISIBLE_DEVICES=" + H200_UUID in _settings(ray, "Environment")
    assert "--num-gpus=1" in _exec_start(ray)
    assert _settings(ray, "DeviceAllow") == ["/dev/nvidia0 rw"] + [d + " rw" for d in CONTROL]


def test_no_gpus_given_leaves_the_units_unrestricted(tmp_path):
    units = _render(tmp_path, {"vllm_serve_hosts": ["a"]})
    for unit in units.values():
        assert not [e for e in _settings(unit, "Environment") if e.startswith("CUDA_VISIBLE_DEVICES")]
        assert _settings(unit, "DevicePolicy") == [] and _settings(unit, "DeviceAllow") == []


def test_container_units_get_one_cdi_device_per_gpu(tmp_path):
    units = _render(tmp_path, {"vllm_serve_runtime": "container", "vllm_serve_image": IMAGE, "vllm_serve_hosts": ["a"],
                               "vllm_serve_gpus": [2, 3], "ray_cluster_runtime": "container", "ray_cluster_image": IMAGE,
                               "ray_cluster_gpus": [6]})
    argv = _exec_start(units["a-vllm.service"])
    assert [arg for arg in argv if arg.startswith("--device")] == ["--device=nvidia.com/gpu=2", "--device=nvidia.com/gpu=3"]
    assert not [e for e in _settings(units["a-vllm.service"], "Environment") if "CUDA_VISIBLE_DEVICES" in e]
    ray = _exec_start(units["a-ray.service"])
    assert [arg for arg in ray if arg.startswith("--device")] == ["--device=nvidia.com/gpu=6"] and "--num-gpus=1" in ray


def test_cuda_visible_devices_in_the_environment_is_refused(tmp_path):
    output = _preflight_refuses(tmp_path, {"vllm_serve_environment": {"CUDA_VISIBLE_DEVICES": "0"}}, "host_preflight.yml")
    assert "vllm_serve_environment sets CUDA_VISIBLE_DEVICES" in output


def test_flashinfer_sampler_is_off_unless_asked_for(tmp_path):
    # CUDA vLLM 0.26 died at its first sample on the H200 when FlashInfer's sampler tried to JIT-compile in the unit
    # (no ninja, nvcc or CUDA headers there): shared/fixtures/gpu/h200-device-20261206.
    (tmp_path / "default").mkdir()
    (tmp_path / "asked").mkdir()
    default = _render(tmp_path / "default", {"vllm_serve_hosts": ["a"]})["a-vllm.env"].split("\n")
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in default
    asked = _render(tmp_path / "asked", {"vllm_serve_hosts": ["a"], "vllm_serve_flashinfer_sampler": True})
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in asked["a-vllm.env"]


def test_flashinfer_sampler_in_the_environment_is_refused(tmp_path):
    output = _preflight_refuses(tmp_path, {"vllm_serve_environment": {"VLLM_USE_FLASHINFER_SAMPLER": "1"}},
                                "host_preflight.yml")
    assert "vllm_serve_environment sets VLLM_USE_FLASHINFER_SAMPLER" in output and "vllm_serve_flashinfer_sampler" in output


@pytest.mark.parametrize("extra, words", [
    ({"vllm_serve_served_name": "tiny llama;id"}, "vllm_serve_served_name 'tiny llama;id' may hold only"),
    ({"vllm_serve_extra_args": ["--api-key", "k" * 20]}, "vllm_serve_extra_args[0] sets --api-key"),
    ({"vllm_serve_extra_args": ["--max-num-seqs=8\nExecStartPre=/bin/sh"]}, "vllm_serve_extra_args[0] holds a line break"),
    ({"vllm_serve_environment": {"A": "1\nLD_PRELOAD=/tmp/x.so"}}, "vllm_serve_environment[A] holds a line break"),
    ({"vllm_serve_api_key": "k" * 20 + "\nLD_PRELOAD=/tmp/x.so"}, "vllm_serve_api_key (vllm_cluster_api_key) must be"),
])
def test_hostile_values_are_refused_before_any_host_changes(tmp_path, extra, words):
    # The first play of deploy.yml runs host_preflight.yml on every node: these reach ExecStart and the env file.
    output = _preflight_refuses(tmp_path, extra, "host_preflight.yml")
    assert words in output, output[-2000:]
    assert "LD_PRELOAD" not in output or "vllm_serve_environment" in words
