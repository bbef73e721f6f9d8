"""vllm_setting_changes as a playbook calls it: new text first, previous as its argument."""

from ansible_collections.llmserve.vllm_cluster.plugins.filter.rollout import FilterModule

FILTERS = FilterModule().filters()
CHANGES = FILTERS["vllm_setting_changes"]


def test_argument_order_is_new_then_previous():
    changes = CHANGES("VLLM_API_KEY=new-key-0123456789\nX=1\n", "VLLM_API_KEY=old-key-0123456789\n")
    assert changes == [{"setting": "env VLLM_API_KEY", "change": "changed", "variable": "vllm_cluster_api_key"},
                       {"setting": "env X", "change": "added", "variable": "vllm_serve_environment['X']"}]


def test_rollout_restarts_keeps_plan_order():
    pending = [{"replica": "b", "host": "h2", "changed": ["unit"]}, {"replica": "a", "host": "h1", "changed": []}]
    assert [entry["replica"] for entry in FILTERS["vllm_rollout_restarts"](pending, ["a", "b"])] == ["a", "b"]
