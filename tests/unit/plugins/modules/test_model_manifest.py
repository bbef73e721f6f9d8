"""model_manifest module: write once, verify, refuse mismatches, check mode, and the stat cache file."""

import json

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.modules import model_manifest


@pytest.fixture
def tree(tmp_path):
    model = tmp_path / "cache" / "models" / "m" / "rev"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "weights.bin").write_bytes(b"\0" * 1000)
    return {"path": str(model), "manifest": str(tmp_path / "cache" / "manifests" / "m@rev.sha256"),
            "stat_cache": str(tmp_path / "state" / "manifest-cache.json")}


def test_present_writes_once_then_verifies(run_module, tree):
    first = run_module(model_manifest.main, dict(tree, state="present"))
    assert not first.failed and first.result["changed"] and first.result["files"] == 2
    assert first.result["bytes"] == 1002
    second = run_module(model_manifest.main, dict(tree, state="present"))
    assert not second.failed and not second.result["changed"]
    assert second.result["digest"] == first.result["digest"] and second.result["rehashed"] == 0


def test_check_mode_writes_nothing_and_shows_the_manifest(run_module, tree):
    result = run_module(model_manifest.main, dict(tree, state="present", _ansible_check_mode=True, _ansible_diff=True))
    assert result.result["changed"] and "config.json" in result.result["diff"]["after"]
    verify = run_module(model_manifest.main, dict(tree))
    assert verify.failed and "does not exist" in verify.result["msg"]


def test_a_corrupted_file_fails_verification_naming_it(run_module, tree, tmp_path):
    run_module(model_manifest.main, dict(tree, state="present"))
    with open(tree["path"] + "/weights.bin", "r+b") as handle:
        handle.write(b"\1")
    result = run_module(model_manifest.main, dict(tree))
    assert result.failed and "mismatched: weights.bin" in result.result["msg"]
    assert result.result["differences"]["mismatched"] == ["weights.bin"]


def test_a_missing_and_an_extra_file_are_named(run_module, tree):
    run_module(model_manifest.main, dict(tree, state="present"))
    import os
    os.remove(tree["path"] + "/config.json")
    with open(tree["path"] + "/stray.txt", "w") as handle:
        handle.write("x")
    result = run_module(model_manifest.main, dict(tree))
    assert result.failed
    assert result.result["differences"] == {"missing": ["config.json"], "extra": ["stray.txt"], "mismatched": []}


def test_the_stat_cache_is_written_and_used(run_module, tree):
    run_module(model_manifest.main, dict(tree, state="present"))
    with open(tree["stat_cache"]) as handle:
        assert sorted(json.load(handle)[tree["path"]]) == ["config.json", "weights.bin"]
    assert run_module(model_manifest.main, dict(tree)).result["rehashed"] == 0
    assert run_module(model_manifest.main, dict(tree, full=True)).result["rehashed"] == 2


def test_a_manifest_inside_the_model_directory_is_refused(run_module, tree):
    result = run_module(model_manifest.main, dict(tree, manifest=tree["path"] + "/MANIFEST"))
    assert result.failed and "outside" in result.result["msg"]
