"""The built collection, installed from its tarball, through the real ansible CLI.

nvidia-smi is tests/fixtures/bin/nvidia-smi-replay, a HARDWARE STAND-IN that prints real
captures; everything else (build, install, module execution, the planner playbook) is real.
"""

import glob
import json
import os
import shutil
import subprocess
import tarfile

import pytest

# An empty config: the checkout's ansible.cfg must not leak into what the installed collection does.
EMPTY_CFG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "empty-ansible.cfg")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "gpu")
REPLAY = os.path.join(REPO, "tests", "fixtures", "bin", "nvidia-smi-replay")
TOPOLOGY_CAPTURES = sorted(
    [os.path.join(FIXTURES, "h200-1gpu-vm", "nvidia-smi_topo_-m.txt")] + glob.glob(os.path.join(FIXTURES, "public", "*.txt")))


def _run(cmd, env, cwd=None, check=True):
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s failed rc=%d\n%s\n%s" % (cmd, proc.returncode, proc.stdout, proc.stderr))
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the tarball from this checkout and install it into a private collections path."""
    root = tmp_path_factory.mktemp("collection")
    env = dict(os.environ, ANSIBLE_CONFIG=EMPTY_CFG, ANSIBLE_NOCOLOR="1")
    _run(["ansible-galaxy", "collection", "build", "--output-path", str(root), REPO], env)
    tarball = glob.glob(str(root / "llmserve-vllm_cluster-*.tar.gz"))
    assert len(tarball) == 1
    with tarfile.open(tarball[0]) as archive:
        names = archive.getnames()
    assert "plugins/modules/gpu_topology.py" in names
    assert "roles/preflight/meta/argument_specs.yml" in names
    assert not [name for name in names if name.startswith(("tests/", ".ci/", "requirements/", ".venv"))]
    collections = root / "collections"
    # Only the private path counts: a copy elsewhere (e.g. ~/.ansible) must not turn this into a no-op.
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    _run(["ansible-galaxy", "collection", "install", "--force", "-p", str(collections), tarball[0]], env)
    assert (collections / "ansible_collections" / "llmserve" / "vllm_cluster" / "MANIFEST.json").exists()
    return collections


def _module(installed, tmp_path, name, args="", fixture_dir=None, with_smi=True):
    """Run one module with ``ansible localhost -o``; return (ok, result dict)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if with_smi:
        shutil.copy(REPLAY, bindir / "nvidia-smi")
    env = dict(os.environ, ANSIBLE_CONFIG=EMPTY_CFG, ANSIBLE_COLLECTIONS_PATH=str(installed),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1", NVIDIA_SMI_FIXTURE_DIR=fixture_dir or "",
               PATH=str(bindir) + os.pathsep + "/usr/bin:/bin")
    cmd = [shutil.which("ansible"), "localhost", "-c", "local", "-i", "localhost,", "-o",
           "-e", "ansible_python_interpreter=" + shutil.which("python3"), "-m", "llmserve.vllm_cluster." + name]
    if args:
        cmd += ["-a", args]
    proc = _run(cmd, env, check=False)
    line = proc.stdout.strip().splitlines()[-1]
    status, _sep, payload = line.partition(" => ")
    return ("SUCCESS" in status or "CHANGED" in status), json.loads(payload)


def _as_fixture_dir(tmp_path, capture):
    directory = tmp_path / "capture"
    directory.mkdir(exist_ok=True)
    shutil.copy(capture, directory / "nvidia-smi_topo_-m.txt")
    return str(directory)


@pytest.mark.parametrize("capture", TOPOLOGY_CAPTURES, ids=os.path.basename)
def test_gpu_topology_module_on_every_capture(installed, tmp_path, capture):
    from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._topology import parse_topo_matrix

    with open(capture) as handle:
        expected = parse_topo_matrix(handle.read())
    ok, result = _module(installed, tmp_path, "gpu_topology", fixture_dir=_as_fixture_dir(tmp_path, capture))
    assert ok, result
    topology = result["topology"]
    assert set(topology) >= {"gpu_count", "gpus", "matrix", "islands", "nics"}
    for key in ("gpu_count", "gpus", "matrix", "islands", "nics"):
        assert topology[key] == expected[key], key
    assert result["changed"] is False


def test_gpu_topology_refuses_tp_across_pcie(installed, tmp_path):
    capture = os.path.join(FIXTURES, "public", "03b_2gpu_phb_stas00.txt")
    ok, result = _module(installed, tmp_path, "gpu_topology", "require_tp_size=2",
                         fixture_dir=_as_fixture_dir(tmp_path, capture))
    assert not ok
    assert "GPU0" in result["msg"] and "PHB" in result["msg"]


def test_gpu_facts_from_replayed_h200(installed, tmp_path):
    ok, result = _module(installed, tmp_path, "gpu_facts", "source=nvidia-smi",
                         fixture_dir=os.path.join(FIXTURES, "h200-1gpu-vm"))
    assert ok, result
    facts = result["ansible_facts"]["vllm_cluster_gpus"]
    assert (facts["gpu_count"], facts["skus"], facts["driver_version"], facts["cuda_driver_version"]) == \
        (1, ["NVIDIA H200"], "580.159.04", "13.0")


def test_gpu_facts_on_a_host_without_driver(installed, tmp_path):
    ok, result = _module(installed, tmp_path, "gpu_facts", with_smi=False)
    assert ok, result
    facts = result["ansible_facts"]["vllm_cluster_gpus"]
    assert facts["gpu_count"] == 0
    assert facts["source"] == "none"
    assert "no nvidia-smi on PATH" in facts["reason"]


def _playbook(installed, playbook, inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=EMPTY_CFG, ANSIBLE_COLLECTIONS_PATH=str(installed), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INJECT_FACT_VARS="false")
    cmd = [shutil.which("ansible-playbook"), playbook, "-i", inventory] + list(extra)
    return _run(cmd, env, check=False)


@pytest.mark.parametrize("inventory, tp, pp, backend", [
    ("single-node-tp4", 4, 1, "mp"),
    ("two-node-tp4-pp2", 4, 2, "ray"),
])
def test_installed_plan_playbook_on_example_inventories(installed, tmp_path, inventory, tp, pp, backend):
    plan_file = tmp_path / "plan.json"
    proc = _playbook(installed, "llmserve.vllm_cluster.plan", os.path.join(REPO, "inventories", "examples", inventory),
                     "-e", "preflight_plan_file=%s" % plan_file)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(plan_file.read_text())
    replica = plan["replicas"][0]
    assert (replica["tensor_parallel_size"], replica["pipeline_parallel_size"], replica["backend"]) == (tp, pp, backend)
    assert replica["budget"]["fits"] is True
    assert "tp=%d pp=%d backend=%s" % (tp, pp, backend) in proc.stdout


def test_plan_playbook_refuses_a_replica_that_does_not_fit(installed):
    inventory = os.path.join(REPO, "inventories", "examples", "two-node-tp4-pp2")
    proc = _playbook(installed, "llmserve.vllm_cluster.plan", inventory,
                     "-e", '{"vllm_cluster_replicas": [{"name": "r0", "hosts": ["gpu-a"], "tensor_parallel_size": 4, '
                           '"pipeline_parallel_size": 1}]}')
    assert proc.returncode == 2
    assert "replica r0: tp=4 pp=1 needs" in proc.stdout
    assert "raise vllm_cluster_replicas.tensor_parallel_size" in proc.stdout


def test_planner_filters_in_a_playbook(installed, tmp_path):
    playbook = tmp_path / "filters.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  vars:
    config: {num_hidden_layers: 32, hidden_size: 4096, intermediate_size: 14336, num_attention_heads: 32,
             num_key_value_heads: 8, vocab_size: 128256, torch_dtype: bfloat16}
    node: {name: a, gpu_count: 8, gpu_memory_bytes: 85520809984, gpu_name: H100, islands: [[0, 1, 2, 3, 4, 5, 6, 7]]}
    workload: {max_model_len: 8192, concurrency: 32}
  tasks:
    - ansible.builtin.assert:
        that:
          - (config | llmserve.vllm_cluster.vllm_model_shape).params == 8030261248
          - (config | llmserve.vllm_cluster.vllm_kv_bytes_per_token) == 131072
          - (config | llmserve.vllm_cluster.vllm_kv_bytes_per_token('fp8', 4)) == 16384
          - (config | llmserve.vllm_cluster.vllm_memory_budget(node.gpu_memory_bytes, workload)).fits
          - (config | llmserve.vllm_cluster.vllm_plan_parallelism([node], workload)).tp == 1
""")
    proc = _playbook(installed, str(playbook), "localhost,", "-c", "local")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout


def _bench_step(concurrency, p95_ttft):
    bench = {"completed": 8, "failed": 0, "duration": 4.0, "output_throughput": 40.0 * concurrency, "request_throughput": 2.0,
             "median_ttft_ms": p95_ttft / 2, "p95_ttft_ms": p95_ttft, "p99_ttft_ms": p95_ttft, "median_itl_ms": 5.0,
             "p95_itl_ms": 9.0, "p95_tpot_ms": 8.0, "p95_e2el_ms": 500.0}
    return {"name": "c%d" % concurrency, "concurrency": concurrency, "input_len": 64, "output_len": 16, "num_prompts": 8,
            "returncode": 0, "bench": bench, "metrics": {}}


def test_acceptance_report_module_writes_json_markdown_html_and_plots(installed, tmp_path):
    run_dir = tmp_path / "acceptance" / "RUN"
    stages = {"sweep": {"cluster": {"target": "lb", "steps": [_bench_step(1, 100.0), _bench_step(2, 300.0), _bench_step(4, 900.0)]},
                        "gpu_memory": {"node1": []}},
              "cold_load": {"replicas": {"r0": {"ready": True, "seconds": 42.0}}}}
    slo = {"p95_ttft_ms": 500, "p95_itl_ms": 50, "max_error_rate": 0.01, "min_output_tokens_per_s_per_replica": 10,
           "min_gpu_memory_headroom_pct": 5}
    args = json.dumps({"run_dir": str(run_dir), "run_id": "RUN", "stages": stages, "slo": slo,
                       "cluster": {"replicas": [{"name": "r0"}], "model": "m"}})
    ok, result = _module(installed, tmp_path, "acceptance_report", args=args, with_smi=False)
    assert ok, result
    assert result["verdict"] == "pass" and result["knee_concurrency"] == 2
    assert result["stage_verdicts"]["sweep"] == "pass" and result["stage_verdicts"]["failure"] == "not run"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["stages"]["sweep"]["broken_at"] == 4 and report["plots"]
    for name in ("report.md", "report.html", "ttft_vs_concurrency.png", "throughput_vs_concurrency.png"):
        assert (run_dir / name).stat().st_size > 200, name
    assert (run_dir / "ttft_vs_concurrency.png").read_bytes()[:4] == b"\x89PNG"
    bad_slo = json.dumps({"run_dir": str(run_dir), "run_id": "x", "stages": {}, "slo": {"p95_ttft_ms": 1}})
    ok, result = _module(installed, tmp_path, "acceptance_report", args=bad_slo)
    assert not ok and "acceptance_slo_*" in result["msg"]
