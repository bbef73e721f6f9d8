"""sha256 manifests: sha256sum-compatible text, strict parsing, differences, and the stat cache."""

import hashlib
import os
import subprocess

import pytest

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _manifest as m


@pytest.fixture
def snapshot(tmp_path):
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "model.safetensors").write_bytes(os.urandom(4096))
    (root / "sub" / "tokenizer.json").write_text("{}")
    return root


def test_render_is_what_sha256sum_checks(snapshot):
    hashes, stats, rehashed = m.hash_tree(str(snapshot))
    assert sorted(hashes) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    assert rehashed == 3 and stats["config.json"]["size"] == 8
    manifest = snapshot.parent / "model.sha256"
    manifest.write_text(m.render_manifest(hashes))
    check = subprocess.run(["sha256sum", "-c", "--strict", str(manifest)], cwd=snapshot, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert m.parse_manifest(manifest.read_text()) == hashes


def test_stat_cache_skips_unchanged_files_and_catches_a_changed_one(snapshot):
    hashes, stats, rehashed = m.hash_tree(str(snapshot))
    cache = {rel: dict(stats[rel], sha256=hashes[rel]) for rel in hashes}
    again, stats_again, rehashed = m.hash_tree(str(snapshot), cache)
    assert rehashed == 0 and again == hashes and stats_again == stats
    (snapshot / "config.json").write_text('{"a": 2}')
    changed, stats_changed, rehashed = m.hash_tree(str(snapshot), cache)
    assert rehashed == 1 and stats_changed["config.json"]["size"] == len('{"a": 2}')
    assert m.compare(hashes, changed) == {"missing": [], "extra": [], "mismatched": ["config.json"]}


def test_compare_names_missing_and_extra_files():
    expected = {"a": "1" * 64, "b": "2" * 64}
    actual = {"b": "2" * 64, "c": "3" * 64}
    differences = m.compare(expected, actual)
    assert differences == {"missing": ["a"], "extra": ["c"], "mismatched": []}
    assert m.describe(differences) == "missing: a; extra: c"


def test_symlinks_are_refused(snapshot, tmp_path):
    (tmp_path / "elsewhere").write_text("x")
    (snapshot / "link.bin").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(m.ManifestError, match="symlink"):
        m.walk_files(str(snapshot))


@pytest.mark.parametrize("text, message", [
    ("", "lists no files"),
    ("nothex  a.bin\n", "line 1"),
    ("%s  ../escape\n" % ("a" * 64), "outside the model directory"),
    ("%s  /abs\n" % ("a" * 64), "outside the model directory"),
    ("%s a.bin\n" % ("a" * 64), "line 1"),
])
def test_bad_manifests_are_errors(text, message):
    with pytest.raises(m.ManifestError, match=message):
        m.parse_manifest(text)


def test_digest_names_the_whole_listing():
    text = "%s  a\n" % ("0" * 64)
    assert m.manifest_digest(text) == hashlib.sha256(text.encode()).hexdigest()
