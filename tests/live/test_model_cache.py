"""The shared model cache when its staging host drops out of a run (real hosts, real SSH)."""

import os
import subprocess
import textwrap

from sim_hosts import INVENTORY, ansible_env, playbook_argv, recap, ssh

# A cache root of its own on the shared cache, so the rig's staged snapshot stays out of it.
ROOT = "/srv/vllm-cache/test-stage-dropout-%d" % os.getpid()

PLAYBOOK = textwrap.dedent("""\
    - name: Stage the model with the staging host pointed at an empty source
      hosts: vllm_nodes
      gather_facts: false
      pre_tasks:
        - name: Break the staging host's source
          ansible.builtin.set_fact:
            model_cache_source_path: /srv/model-import/no-such-snapshot
          when: inventory_hostname == 'node1'
      roles:
        - role: llmserve.vllm_cluster.model_cache
    """)


def test_the_other_nodes_say_the_staging_host_dropped_out(tmp_path):
    playbook = tmp_path / "stage.yml"
    playbook.write_text(PLAYBOOK)
    try:
        run = subprocess.run(playbook_argv(str(playbook), INVENTORY, "-e", "model_cache_root=%s" % ROOT),
                             capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)
    finally:
        ssh("node1", "rm -rf %s" % ROOT)
    assert run.returncode != 0, run.stdout[-3000:]
    counts = recap(run.stdout)
    assert all(counts[host]["failed"] == 1 and counts[host]["changed"] == 0 for host in ("node1", "node2", "node3")), counts
    assert "holds no config.json" in run.stdout, run.stdout[-3000:]
    fatal = [line for line in run.stdout.splitlines() if line.startswith("fatal: [")]
    for host in ("node2", "node3"):
        said = [line for line in fatal if line.startswith("fatal: [%s]" % host)]
        assert len(said) == 1 and "%s: %s/models/" % (host, ROOT) in said[0], fatal
        assert "the staging host node1 (model_cache_stage_host) failed or became unreachable" in said[0], said
    assert "is not a directory" not in run.stdout
