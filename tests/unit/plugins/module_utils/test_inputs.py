"""Formats of inventory values that reach units, environment files and haproxy.cfg: the hostile inputs of issue 16."""

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _inputs as i


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-32B", "llmserve-sim/tiny-llama",
                                      "a/b", "org_1/model.v2-fp8"])
def test_hub_repo_ids_pass(model_id):
    assert i.model_errors({"id": model_id, "served_name": "llama-3.1-8b"}) == []


@pytest.mark.parametrize("model_id", ["x/y; touch /tmp/p #", "../../etc/passwd", "llama", "a/b/c", "-a/b", "a/.b",
                                      "a/b\nExecStartPre=/bin/evil", "", 7])
def test_other_model_ids_are_refused_by_name(model_id):
    errors = i.model_errors({"id": model_id})
    assert len(errors) == 1 and errors[0].startswith("vllm_cluster_model.id ") and "hub repo id" in errors[0]


@pytest.mark.parametrize("served", ["tiny llama;id", "a'b", 'a"b', "x%n", "name\nExecStartPre=/bin/sh", "-flag", "a b"])
def test_served_names_that_would_break_execstart_are_refused(served):
    errors = i.model_errors({"served_name": served})
    assert len(errors) == 1 and "vllm_cluster_model.served_name" in errors[0] and "no spaces" in errors[0]


def test_org_slash_served_names_pass():
    assert i.model_errors({"served_name": "meta-llama/Llama-3.1-8B-Instruct"}) == []


@pytest.mark.parametrize("name", ["../../etc/evil", ".hidden", "r 0", "r0;x", "-r", "", "x" * 64, None])
def test_replica_names_that_cannot_name_a_unit_and_a_file_are_refused(name):
    errors = i.replica_name_errors([{"name": "r0"}, {"name": name}])
    if name is None:
        assert errors == []   # a missing name is the layout check's to report
    else:
        assert len(errors) == 1 and errors[0].startswith("vllm_cluster_replicas[1].name")


@pytest.mark.parametrize("key", ["short", "a" * 15, "a" * 20 + "\nLD_PRELOAD=/tmp/x.so", "a" * 20 + " b", "a\tb" * 8,
                                 "ключ" * 8, None, 12345678901234567])
def test_api_keys_that_are_short_or_hold_whitespace_are_refused_without_showing_them(key):
    errors = i.api_key_errors(key)
    assert len(errors) == 1 and "vllm_cluster_api_key" in errors[0] and "openssl rand" in errors[0]
    assert str(key) not in errors[0]


def test_a_printable_key_passes():
    assert i.api_key_errors("sim-api-key-0123456789") == [] and i.api_key_errors("!#$%&()*+,-./:;<=>?@[]^_{|}~0") == []


@pytest.mark.parametrize("args, flag", [(["--api-key", "secret"], "--api-key"), (["--api-key=secret"], "--api-key"),
                                        (["--port", "9"], "--port"), (["-tp", "8"], "-tp"),
                                        (["--served-model-name", "x"], "--served-model-name"),
                                        (["--distributed-executor-backend=ray"], "--distributed-executor-backend")])
def test_extra_args_may_not_set_the_collections_own_flags(args, flag):
    errors = i.extra_args_errors(args)
    assert len(errors) == 1 and "vllm_serve_extra_args[0] sets %s" % flag in errors[0]


def test_extra_args_with_line_breaks_are_refused_and_others_pass():
    assert "line break" in i.extra_args_errors(["--enable-prefix-caching", "--x\nExecStartPre=/bin/sh"])[0]
    assert i.extra_args_errors(["--compilation-config", '{"mode": 2, "backend": "eager"}', "--max-num-seqs=64"]) == []


def test_environment_names_and_one_line_values():
    errors = i.environment_errors({"OK_NAME": "1", "BAD-NAME": "1", "MULTI": "a\nLD_PRELOAD=/x.so", "1X": "2"})
    assert len(errors) == 3 and any("MULTI" in e and "line break" in e for e in errors)
    assert i.environment_errors({"VLLM_CPU_KVCACHE_SPACE": 1, "OMP_NUM_THREADS": "1"}) == []


@pytest.mark.parametrize("name", sorted(i.OWNED_ENVIRONMENT))
def test_environment_names_the_roles_write_are_refused_with_where_they_belong(name):
    errors = i.environment_errors({name: "s3cret-value", "OMP_NUM_THREADS": "1"})
    assert len(errors) == 1 and errors[0].startswith("vllm_serve_environment sets %s, which the collection writes" % name)
    assert "s3cret-value" not in errors[0]
