"""vllm_plan module: recommendation, explicit replicas, declared vs. real hardware, refusals."""

import json

from ansible_collections.llmserve.vllm_cluster.plugins.modules import vllm_plan

MIB = 1024 * 1024
LLAMA70 = dict(num_hidden_layers=80, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, torch_dtype="bfloat16")
MODEL = {"id": "meta-llama/Llama-3.1-70B-Instruct", "revision": "1605565b47bb9346c5515c34102e054115b4f98b", "config": LLAMA70}
A100 = {"count": 4, "sku": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960, "islands": [[0, 1, 2, 3]]}
H100 = {"count": 4, "sku": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "islands": [[0, 1, 2, 3]]}
WORKLOAD = {"max_model_len": 8192, "concurrency": 16}


def _nodes(declared, *names):
    return [{"name": name, "declared": declared, "facts": None, "topology": None} for name in names]


def _args(**overrides):
    args = {"model": MODEL, "workload": WORKLOAD, "nodes": _nodes(A100, "gpu-a", "gpu-b")}
    args.update(overrides)
    return args


def test_recommendation_becomes_the_layout(run_module):
    result = run_module(vllm_plan.main, _args())
    assert not result.failed, result.result
    out = result.result
    assert out["changed"] is False
    assert (out["recommendation"]["tp"], out["recommendation"]["pp"], out["recommendation"]["backend"]) == (4, 2, "ray")
    assert [(r["name"], r["hosts"], r["tensor_parallel_size"], r["pipeline_parallel_size"], r["backend"]) for r in out["replicas"]] \
        == [("r0", ["gpu-a", "gpu-b"], 4, 2, "ray")]
    assert out["summary"][0].startswith("recommended: tp=4 pp=2 backend=ray; 1 replica(s) fit these nodes")
    assert out["summary"][1].startswith("r0: tp=4 pp=2 backend=ray on gpu-a GPUs 0,1,2,3 + gpu-b GPUs 0,1,2,3, port 8000; per GPU 16.4 GiB weights")


def test_explicit_single_node_replicas(run_module):
    replicas = [{"name": "r%d" % i, "hosts": ["gpu-%s" % host], "tensor_parallel_size": 4, "pipeline_parallel_size": 1}
                for i, host in enumerate("ab")]
    result = run_module(vllm_plan.main, _args(nodes=_nodes(H100, "gpu-a", "gpu-b"), replicas=replicas,
                                              _ansible_check_mode=True))
    assert not result.failed, result.result
    assert [r["backend"] for r in result.result["replicas"]] == ["mp", "mp"]
    assert result.result["replicas"][0]["max_concurrency"] == 44


def test_too_small_tp_is_refused_with_numbers(run_module):
    replicas = [{"name": "r0", "hosts": ["gpu-a"], "tensor_parallel_size": 4, "pipeline_parallel_size": 1}]
    result = run_module(vllm_plan.main, _args(replicas=replicas))
    assert result.failed
    assert result.result["msg"].startswith("preflight plan found 1 problem(s):\n- replica r0: tp=4 pp=1 needs")
    assert "GiB is usable; raise vllm_cluster_replicas.tensor_parallel_size" in result.result["msg"]


def test_real_facts_disagreeing_with_inventory(run_module):
    facts = {"source": "nvml", "gpu_count": 1, "skus": ["NVIDIA H200"], "mig_enabled": False, "driver_version": "580.159.04",
             "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771}]}
    nodes = [{"name": "gpu-a", "declared": A100, "facts": facts, "topology": {"islands": [[0]]}}]
    result = run_module(vllm_plan.main, _args(nodes=nodes))
    assert result.failed
    assert "vllm_cluster_node_gpus.count is 4 but the host reports 1 GPUs" in result.result["msg"]
    assert "GPU SKU mismatch" in result.result["msg"]


def test_nothing_fits_names_the_fix(run_module):
    result = run_module(vllm_plan.main, _args(nodes=_nodes(A100, "gpu-a")))
    assert result.failed
    assert result.result["msg"].startswith("preflight plan found 1 problem(s):\n- model does not fit: 131.4 GiB of weights")


def test_workload_and_model_errors(run_module):
    result = run_module(vllm_plan.main, _args(workload={"max_model_len": 262144, "concurrency": 0}))
    assert result.result["errors"] == ["vllm_cluster_workload.concurrency must be a positive integer, got 0"]
    result = run_module(vllm_plan.main, _args(workload={"max_model_len": 262144, "concurrency": 1}))
    assert result.result["errors"] == ["vllm_cluster_workload.max_model_len=262144 is above the model's limit 131072 "
                                       "(max_position_embeddings); lower it to at most 131072"]
    result = run_module(vllm_plan.main, _args(model={"id": "x"}))
    assert result.result["msg"] == "preflight plan refused: vllm_cluster_model needs config (the model's config.json as a dict), " \
        "config_path or shape"


def test_config_path(run_module, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA70))
    result = run_module(vllm_plan.main, _args(model={"config_path": str(path)}))
    assert not result.failed
    missing = run_module(vllm_plan.main, _args(model={"config_path": str(tmp_path / "nope.json")}))
    assert "vllm_cluster_model.config_path" in missing.result["msg"] and "cannot be read as JSON" in missing.result["msg"]


def test_hostile_model_id_served_name_and_replica_name_are_refused_by_the_plan(run_module):
    model = dict(MODEL, id="x/y; touch /tmp/p #", served_name="tiny llama;id")
    replicas = [{"name": "../../etc/evil", "hosts": ["gpu-a"], "tensor_parallel_size": 4, "pipeline_parallel_size": 1}]
    result = run_module(vllm_plan.main, _args(model=model, replicas=replicas))
    assert result.failed
    errors = result.result["errors"]
    assert any(e.startswith("vllm_cluster_model.id 'x/y; touch /tmp/p #' is not a hub repo id") for e in errors), errors
    assert any(e.startswith("vllm_cluster_model.served_name 'tiny llama;id'") for e in errors), errors
    assert any(e.startswith("vllm_cluster_replicas[0].name '../../etc/evil'") for e in errors), errors
