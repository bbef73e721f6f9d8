"""What changed between a replica's previous and new files: settings and the variables behind them, never values."""

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _rollout as r

UNIT = """# Ansible managed
[Unit]
Description=vLLM replica r0 (tiny-llama, API server, rank 0 of 2)
After=network-online.target ray-head.service ray-worker.service

[Service]
EnvironmentFile=-/etc/vllm-cluster/network.env
EnvironmentFile=/etc/vllm/r0.env
Environment=HOME=/var/lib/vllm/r0
Environment=CUDA_VISIBLE_DEVICES=GPU-1
ExecStart=/opt/vllm/current/bin/vllm serve /srv/models/tiny/b7fd \\
  --served-model-name tiny-llama \\
  --revision b7fd61f5cd257a9ef467c9fc0c53b84b5e7116bb \\
  --host 10.213.7.11 --port 8000 \\
  --tensor-parallel-size 1 \\
  --max-model-len 1024 \\
  --gpu-memory-utilization 0.9 --compilation-config '{"mode": 2, "backend": "eager"}'
DeviceAllow=/dev/nvidia0 rw
DeviceAllow=/dev/nvidiactl rw
"""
ENV = "# Ansible managed\nVLLM_API_KEY=sim-api-key-0123456789\nVLLM_HOST_IP=10.213.7.11\nVLLM_CPU_KVCACHE_SPACE=1\nOMP_NUM_THREADS=1\n"


def by_setting(changes):
    return {change["setting"]: (change["change"], change["variable"]) for change in changes}


def test_same_text_has_no_changes_even_with_other_comments():
    assert r.setting_changes(UNIT, UNIT.replace("# Ansible managed", "# managed elsewhere")) == []
    assert r.setting_changes(ENV, ENV) == []


def test_environment_changes_name_the_key_and_variable_never_the_value():
    after = ENV.replace("VLLM_CPU_KVCACHE_SPACE=1\n", "").replace("OMP_NUM_THREADS=1", "OMP_NUM_THREADS=2")
    after = after.replace("sim-api-key-0123456789", "another-key-abcdefghij") + "VLLM_LOGGING_LEVEL=NOPE\n"
    changes = r.setting_changes(ENV, after)
    assert by_setting(changes) == {
        "env OMP_NUM_THREADS": ("changed", "vllm_serve_environment['OMP_NUM_THREADS']"),
        "env VLLM_API_KEY": ("changed", "vllm_cluster_api_key"),
        "env VLLM_CPU_KVCACHE_SPACE": ("removed", "vllm_serve_environment['VLLM_CPU_KVCACHE_SPACE']"),
        "env VLLM_LOGGING_LEVEL": ("added", "vllm_serve_environment['VLLM_LOGGING_LEVEL']"),
    }
    assert "another-key" not in repr(changes) and "sim-api-key" not in repr(changes) and "NOPE" not in repr(changes)


def test_command_line_is_compared_flag_by_flag_across_continuations():
    after = UNIT.replace("--max-model-len 1024", "--max-model-len 512").replace(
        " --compilation-config '{\"mode\": 2, \"backend\": \"eager\"}'", " --enforce-eager")
    assert by_setting(r.setting_changes(UNIT, after)) == {
        "ExecStart --compilation-config": ("removed", "vllm_serve_extra_args"),
        "ExecStart --enforce-eager": ("added", "vllm_serve_extra_args"),
        "ExecStart --max-model-len": ("changed", "vllm_cluster_workload['max_model_len']"),
    }


def test_runtime_model_and_plan_changes_name_their_own_variables():
    after = (UNIT.replace("/opt/vllm/current/bin/vllm", "/opt/vllm/0.33.0/bin/vllm")
             .replace("/srv/models/tiny/b7fd", "/srv/models/tiny/0000")
             .replace("CUDA_VISIBLE_DEVICES=GPU-1", "CUDA_VISIBLE_DEVICES=GPU-2")
             .replace("DeviceAllow=/dev/nvidia0 rw", "DeviceAllow=/dev/nvidia1 rw"))
    changes = by_setting(r.setting_changes(UNIT, after))
    assert changes["ExecStart program"][1].startswith("vllm_runtime")
    assert changes["ExecStart model path"][1].startswith("vllm_cluster_model")
    assert changes["Environment CUDA_VISIBLE_DEVICES"] == ("changed", "vllm_cluster_replicas (the plan)")
    assert changes["DeviceAllow"] == ("changed", "vllm_cluster_replicas (the plan)")
    assert len(changes) == 4


def test_a_new_file_lists_every_setting_as_added():
    changes = r.setting_changes("", ENV)
    assert {change["change"] for change in changes} == {"added"} and len(changes) == 4


def test_restarts_follow_plan_order_and_group_hosts():
    pending = [{"replica": "r1", "host": "node3", "changed": ["unit"], "previous_dir": "/x"},
               {"replica": "r0", "host": "node2", "changed": ["environment file"]},
               {"replica": "r0", "host": "node1", "changed": ["environment file", "unit"]}]
    assert r.restarts(pending, ["r0", "r1", "r2"]) == [
        {"replica": "r0", "hosts": {"node2": ["environment file"], "node1": ["environment file", "unit"]}},
        {"replica": "r1", "hosts": {"node3": ["unit"]}}]
    assert r.restarts([], ["r0"]) == [] and r.restarts(None, ["r0"]) == []
