"""Model cache faults, run through the real model_cache role on this machine (connection local):
a staging interrupted halfway (the whole ansible-playbook process group SIGKILLed mid-copy), a corrupted
file in the cache, the cache's filesystem full (a small tmpfs), and the preflight refusals for a missing
source and a manifest that is not the pinned one. Each fault is recovered or refused cleanly; the
figures go to artifacts/reliability/model-cache-faults.json for the reliability summary."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLAY = os.path.join(REPO, "tests", "integration", "model_cache", "play.yml")
RESULTS = os.path.join(REPO, "artifacts", "reliability", "model-cache-faults.json")
REVISION = "a" * 40
MIB = 1024 * 1024


def _record(fault, outcome, seconds):
    rows = []
    if os.path.exists(RESULTS):
        with open(RESULTS) as handle:
            rows = [row for row in json.load(handle) if row["fault"] != fault]
    rows.append({"fault": fault, "outcome": outcome, "seconds": None if seconds is None else round(seconds, 1)})
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as handle:
        json.dump(rows, handle, indent=1)
    print("\n%s: %s%s" % (fault, outcome, "" if seconds is None else " in %.1f s" % seconds))


def _source(path, size_mib):
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as handle:
        json.dump({"architectures": ["LlamaForCausalLM"]}, handle)
    block = os.urandom(4 * MIB)
    with open(os.path.join(path, "model.safetensors"), "wb") as handle:
        handle.write(block * (size_mib // 4))
    return path


class Cache:
    def __init__(self, tmp_path, root=None, source_mib=16, hosts=("stage",)):
        self.tmp = tmp_path
        self.root = str(root or tmp_path / "cache")
        self.source = _source(str(tmp_path / "source"), source_mib)
        self.inventory = tmp_path / "hosts.json"
        # Hosts on this one machine share its filesystem: more than one is a shared cache.
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        self.inventory.write_text(json.dumps({"all": {"children": {"vllm_nodes": {"hosts": {
            host: local for host in hosts}}}}}))
        self.model = os.path.join(self.root, "models", "llmserve-test--tiny", REVISION)
        self.staging = os.path.join(self.root, ".staging", "llmserve-test--tiny@" + REVISION)

    def argv(self, **extra):
        variables = dict(model_cache_model_id="llmserve-test/tiny", model_cache_revision=REVISION,
                         model_cache_source="path", model_cache_source_path=self.source, model_cache_root=self.root,
                         model_cache_stage_host="stage", model_cache_stat_cache=str(self.tmp / "stat-cache.json"),
                         model_cache_free_margin_mib=1)
        variables.update(extra)
        return [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(self.inventory),
                "-e", json.dumps(variables), PLAY]

    def run(self, **extra):
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CALLBACK_RESULT_FORMAT="json")
        start = time.monotonic()
        run = subprocess.run(self.argv(**extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                             check=False)
        return run, time.monotonic() - start

    def same_as_source(self):
        for name in ("config.json", "model.safetensors"):
            with open(os.path.join(self.source, name), "rb") as a, open(os.path.join(self.model, name), "rb") as b:
                if a.read() != b.read():
                    return False
        return True


def _changed(stdout):
    return [int(part.split("=")[1]) for line in stdout.splitlines() if line.startswith("stage ")
            for part in line.split() if part.startswith("changed=")]


def test_interrupted_staging_leaves_nothing_in_place_and_the_next_run_stages(tmp_path):
    cache = Cache(tmp_path, source_mib=1024)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    # Its own session, so the whole run (ansible-playbook, the module, cp) dies at once, as on a power loss.
    proc = subprocess.Popen(cache.argv(), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    partial = os.path.join(cache.staging, "model.safetensors")
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.exists(partial) and os.path.getsize(partial) > 64 * MIB:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the staging finished before it could be interrupted"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert os.path.getsize(partial) < 1024 * MIB, "the copy was not interrupted halfway"
    assert not os.path.exists(cache.model), "a partial snapshot is in place"
    run, seconds = cache.run()
    assert run.returncode == 0, run.stdout[-3000:]
    assert cache.same_as_source() and not os.path.exists(cache.staging)
    _record("model download interrupted halfway (whole run SIGKILLed mid-copy)", "recovered", seconds)


def test_corrupted_file_is_caught_and_staged_again(tmp_path):
    cache = Cache(tmp_path)
    run, _seconds = cache.run()
    assert run.returncode == 0, run.stdout[-3000:]
    subprocess.run(["dd", "if=/dev/urandom", "of=%s/model.safetensors" % cache.model, "bs=1", "count=1", "seek=4096",
                    "conv=notrunc", "status=none"], check=True)
    assert not cache.same_as_source()
    run, seconds = cache.run()
    assert run.returncode == 0, run.stdout[-3000:]
    assert "mismatched: model.safetensors" in run.stdout and "staging it again from the source" in run.stdout
    assert cache.same_as_source()
    run, _seconds = cache.run()
    assert run.returncode == 0 and _changed(run.stdout) == [0], run.stdout[-2000:]
    _record("corrupted file in the model cache", "recovered", seconds)


@pytest.fixture
def small_filesystem(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_full_disk_is_refused_with_a_clear_error(tmp_path, small_filesystem):
    cache = Cache(tmp_path, root=small_filesystem, source_mib=20)
    run, seconds = cache.run()
    assert run.returncode != 0
    assert "model_cache_root %s has" % small_filesystem in run.stdout and "MiB free" in run.stdout, run.stdout[-3000:]
    assert not os.path.exists(cache.model) and not os.path.exists(cache.staging)
    # Past the check (a margin that lets it through), cp itself hits ENOSPC: the same clean refusal.
    run, _seconds = cache.run(model_cache_free_margin_mib=-100)
    assert run.returncode != 0
    assert "the filesystem is full" in run.stdout and "nothing partial was left in place" in run.stdout, run.stdout[-3000:]
    assert not os.path.exists(cache.model) and not os.path.exists(cache.staging)
    _record("disk under the cache full", "refused", seconds)


def test_missing_source_is_refused_before_any_change(tmp_path):
    cache = Cache(tmp_path)
    shutil.rmtree(cache.source)
    run, _seconds = cache.run()
    assert run.returncode != 0 and _changed(run.stdout) == [0], run.stdout[-3000:]
    assert "model_cache_source_path %s holds no config.json" % cache.source in run.stdout
    assert not os.path.exists(os.path.join(cache.root, "models"))


def test_manifest_other_than_the_pinned_one_is_refused(tmp_path):
    cache = Cache(tmp_path)
    run, _seconds = cache.run()
    assert run.returncode == 0, run.stdout[-3000:]
    run, _seconds = cache.run(model_cache_manifest_digest="0" * 64)
    assert run.returncode != 0 and _changed(run.stdout) == [0], run.stdout[-3000:]
    assert "but model_cache_manifest_digest (vllm_cluster_model.manifest_digest) pins " + "0" * 64 in run.stdout


def test_other_nodes_name_the_staging_host_that_dropped_out(tmp_path):
    cache = Cache(tmp_path, hosts=("stage", "node2", "node3"))
    run, _seconds = cache.run(model_cache_source_path="{{ '%s' if inventory_hostname == 'stage' else '%s' }}" % (
        tmp_path / "no-such-snapshot", cache.source))
    assert run.returncode != 0, run.stdout[-3000:]
    assert "holds no config.json" in run.stdout, run.stdout[-3000:]
    fatal = [line for line in run.stdout.splitlines() if line.startswith("fatal: [")]
    for host in ("node2", "node3"):
        said = [line for line in fatal if line.startswith("fatal: [%s]" % host)]
        assert len(said) == 1 and "%s: %s was not staged" % (host, cache.model) in said[0], fatal
        assert "the staging host stage (model_cache_stage_host) failed or became unreachable" in said[0], said
    assert "is not a directory" not in run.stdout
    assert not os.path.exists(os.path.join(cache.root, "models"))
