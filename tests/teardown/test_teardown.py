"""playbooks/teardown.yml on the deployed sim, after every live test (tests/run-all.sh runs this stage just before the
rig goes): the services stop before the firewall goes, and nothing of the cluster is left behind."""

import subprocess

from sim_hosts import ansible_env, load_balancer, load_inventory, playbook_argv, recap, ssh

HOSTS, GROUP_VARS = load_inventory()
NODES = sorted(HOSTS["all"]["children"]["vllm_nodes"]["hosts"])


def test_teardown_stops_services_first_removes_the_firewall_last_and_leaves_nothing():
    run = subprocess.run(playbook_argv("playbooks/teardown.yml"), env=ansible_env(), capture_output=True, text=True,
                         timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    assert all(counts["failed"] == 0 and counts["unreachable"] == 0 for counts in recap(run.stdout).values())
    tasks = [line for line in run.stdout.splitlines() if line.startswith("TASK [")]
    firewall = min(index for index, line in enumerate(tasks) if "firewall :" in line)
    haproxy = min(index for index, line in enumerate(tasks) if "Stop and disable HAProxy" in line)
    units = min(index for index, line in enumerate(tasks) if "Stop and disable each unit" in line)
    assert haproxy < units < firewall, tasks
    for host in NODES:
        left = ssh(host, "systemctl list-units --all --plain --no-legend 'vllm-*' 'ray-*' | grep -v ' inactive ';"
                         " ls -d /etc/vllm /etc/vllm-cluster /var/lib/vllm /var/lib/ray /etc/systemd/system/vllm-* 2>/dev/null;"
                         " nft list table inet llmserve 2>/dev/null | head -1", check=False).stdout.strip()
        assert left == "", (host, left)
        assert ssh(host, "grep -rls -F -- '%s' /etc || true" % GROUP_VARS["vllm_cluster_api_key"]).stdout.strip() == "", host
    balancer = load_balancer()
    assert ssh(balancer, "systemctl is-active haproxy.service", check=False).stdout.strip() != "active"
    dropins = "/etc/systemd/system/haproxy.service.d/"
    assert ssh(balancer, "ls /etc/haproxy/vllm-check.env %svllm-check.conf %shardening.conf 2>/dev/null" % (dropins, dropins),
               check=False).stdout.strip() == ""
