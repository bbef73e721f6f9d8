"""Nothing is reachable that should not be, and the API key is nowhere it should not be.

A host outside the cluster network (a network namespace on the rig's bridge, with an address that is no
node's) tries every TCP port every node listens on: only SSH and the load balancer's port may answer. The
load balancer refuses vLLM's unauthenticated paths, /v1 answers 401 without the key. The key is searched
for in every process's command line, the journal, world-readable files and Ansible's own output.
Runs after `molecule test -s sim --destroy never` (tests/run-all.sh), while the rig is up and deployed.
"""

import http.server
import json
import os
import subprocess
import textwrap
import threading

import pytest

from sim_hosts import REPO, address, ansible_env, load_inventory, playbook_argv, recap, ssh

HOSTS, GROUP_VARS = load_inventory()
NODES = sorted(HOSTS["all"]["children"]["vllm_nodes"]["hosts"])
LB = sorted(HOSTS["all"]["children"]["vllm_loadbalancers"]["hosts"])[0]
KEY = GROUP_VARS["vllm_cluster_api_key"]
NETNS = "llmserve-outside"
RESULTS = os.path.join(REPO, "artifacts", "security")
# The bridge's first address is the controller; nodes are .11 and up; this one is no node's.
OUTSIDE_ADDRESS = address(NODES[0]).rsplit(".", 1)[0] + ".200"

# The key reaches the search as a pattern file written from stdin: on grep's command line it would be found.
PATTERN = "pat=$(mktemp); cat > $pat; "

PROBE = textwrap.dedent("""
    import json, socket, sys, concurrent.futures
    def reach(target):
        host, port = target
        try:
            socket.create_connection((host, port), timeout=1.5).close()
            return True
        except OSError:
            return False
    targets = [tuple(t) for t in json.load(sys.stdin)]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        print(json.dumps([list(t) + [ok] for t, ok in zip(targets, pool.map(reach, targets))]))
""")

HTTP = textwrap.dedent("""
    import json, sys, urllib.request, urllib.error
    base, key = sys.stdin.read().split()
    out = {}
    for path, auth in (("/metrics", False), ("/health", False), ("/v1/models", False), ("/v1/models", True)):
        request = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + key} if auth else {})
        try:
            out[path + (" with key" if auth else "")] = urllib.request.urlopen(request, timeout=10).status
        except urllib.error.HTTPError as error:
            out[path + (" with key" if auth else "")] = error.code
    print(json.dumps(out))
""")


def _save(name, data):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name), "w") as handle:
        json.dump(data, handle, indent=1)


@pytest.fixture(scope="module")
def outside():
    """A host on the cluster's bridge but outside the cluster network; removed afterwards."""
    bridge = subprocess.run(["ip", "-o", "route", "get", address(NODES[0])], capture_output=True, text=True,
                            check=True).stdout.split(" dev ")[1].split()[0]
    subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True, check=False)
    steps = [["ip", "netns", "add", NETNS],
             ["ip", "link", "add", "llmout0", "type", "veth", "peer", "name", "llmout1"],
             ["ip", "link", "set", "llmout1", "netns", NETNS],
             ["ip", "link", "set", "llmout0", "master", bridge, "up"],
             ["ip", "-n", NETNS, "addr", "add", OUTSIDE_ADDRESS + "/24", "dev", "llmout1"],
             ["ip", "-n", NETNS, "link", "set", "llmout1", "up"],
             ["ip", "-n", NETNS, "link", "set", "lo", "up"]]
    try:
        for step in steps:
            subprocess.run(step, capture_output=True, text=True, check=True)
        yield lambda script, stdin: subprocess.run(
            ["ip", "netns", "exec", NETNS, "python3", "-c", script], input=stdin, capture_output=True, text=True,
            timeout=120, check=True).stdout
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", "llmout0"], capture_output=True, check=False)


def _listening(host):
    """(port, process) of every TCP socket a node listens on beyond loopback."""
    lines = ssh(host, "ss -Hltnp").stdout.splitlines()
    found = set()
    for line in lines:
        fields = line.split()
        local, process = fields[3], (fields[5] if len(fields) > 5 else "")
        bind, port = local.rsplit(":", 1)
        if bind.strip("[]") in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
            continue
        found.add((int(port), process.split('"')[1] if '"' in process else "?"))
    return sorted(found)


def test_only_ssh_and_the_load_balancer_answer_outside_the_cluster(outside):
    allowed = {(host, 22) for host in NODES} | {(LB, 8080)}
    listening = {host: _listening(host) for host in NODES}
    targets = [[address(host), port] for host in NODES for port, _name in listening[host]]
    reached = json.loads(outside(PROBE, json.dumps(targets)))
    by_address = {address(host): host for host in NODES}
    open_ports = {(by_address[target], port) for target, port, ok in reached if ok}
    exposures = sorted(open_ports - allowed)
    names = {(host, port): name for host in NODES for port, name in listening[host]}
    _save("exposure.json", {"outside_address": OUTSIDE_ADDRESS, "ports_tried": len(targets),
                            "reachable": sorted(open_ports), "exposures": [[h, p, names[(h, p)]] for h, p in exposures]})
    print("\nports tried from outside the cluster network: %d, reachable: %s, exposures: %d" % (
        len(targets), sorted(open_ports), len(exposures)))
    # Ray's GCS and vLLM's API must be among what was tried, or the scan proves nothing.
    head_ports = [port for port, _name in listening[NODES[0]]]
    assert 6379 in head_ports and 8000 in head_ports, head_ports
    assert open_ports >= allowed, "SSH or the load balancer is not reachable from outside: %s" % sorted(open_ports)
    assert exposures == [], ["%s:%d (%s)" % (h, p, names[(h, p)]) for h, p in exposures]


def test_cluster_ports_still_answer_inside_the_cluster():
    # From another node: Ray's GCS on the head and the replica's API must stay reachable.
    head = address(NODES[0])
    run = ssh(NODES[-1], "python3 -c 'import socket; [socket.create_connection((\"%s\", p), timeout=3).close() "
                         "for p in (6379, 8000)]'" % head, check=False)
    assert run.returncode == 0, run.stderr


def test_load_balancer_refuses_unauthenticated_paths(outside):
    codes = json.loads(outside(HTTP, "http://%s:8080 %s" % (address(LB), KEY)))
    _save("load-balancer-paths.json", codes)
    assert codes == {"/metrics": 403, "/health": 403, "/v1/models": 401, "/v1/models with key": 200}


def test_api_key_not_on_any_command_line_or_in_the_journal():
    for host in NODES:
        search = PATTERN + ("grep -l -F -f $pat /proc/[0-9]*/cmdline 2>/dev/null | wc -l; "
                            "journalctl --no-pager -q | grep -c -F -f $pat; rm -f $pat")
        found = ssh(host, search, stdin=KEY + "\n", check=False).stdout.split()
        assert found == ["0", "0"], "%s: key in %s command lines, %s journal lines" % (host, found[0], found[1])


def test_api_key_only_in_root_only_files():
    for host in NODES:
        search = PATTERN + ("grep -rl -F -f $pat /etc /opt/vllm/current/bin /var/lib/vllm /var/lib/ray 2>/dev/null "
                            "| xargs -r stat -c '%n %a %U'; rm -f $pat")
        run = ssh(host, search, stdin=KEY + "\n", check=False)
        files = [line.split() for line in run.stdout.splitlines()]
        assert files, "%s: the key is in no file at all (the replica cannot have it)" % host
        assert all(mode == "600" and owner == "root" for _name, mode, owner in files), files


def test_services_run_unprivileged():
    for host in NODES:
        owners = ssh(host, "ps -eo user:20,args | grep -E 'vllm serve|VLLM::|raylet|gcs_server' | grep -v grep "
                           "| awk '{print $1}' | sort -u").stdout.split()
        assert owners and "root" not in owners, "%s runs cluster processes as %s" % (host, owners)


def test_check_diff_run_leaks_no_secret_and_changes_nothing():
    run = subprocess.run(playbook_argv("playbooks/deploy.yml", os.path.join(REPO, "inventories", "sim"), "--check",
                                       "--diff", "-v"),
                         cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=900, check=False)
    counts = recap(run.stdout)
    assert run.returncode == 0, run.stdout[-3000:]
    assert KEY not in run.stdout + run.stderr, "the API key is in deploy.yml --check --diff -v output"
    assert counts and not any(count["changed"] for count in counts.values()), counts


# Exposure limits a little above what the units measure on the rig (systemd-analyze security, 0 = locked
# down, 10 = unconfined): vLLM and Ray 3.2 (they keep devices, JIT and NUMA syscalls), HAProxy 2.8, firewall 2.0.
EXPOSURE_LIMITS = {"vllm-": 4.0, "ray-": 4.0, "haproxy": 4.0, "llmserve-firewall": 3.0}
REQUIRED = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
            "CapabilityBoundingSet": ""}


def test_units_hardened_per_systemd_analyze():
    table = []
    for host in NODES:
        # The rig's image carries HAProxy on every host; it is the load balancer (and ours) only on LB.
        patterns = "'vllm-*' 'ray-*' llmserve-firewall.service" + (" haproxy.service" if host == LB else "")
        units = ssh(host, "systemctl list-units --no-legend --plain --type=service %s | awk '{print $1}'"
                    % patterns).stdout.split()
        for unit in units:
            score = float(ssh(host, "systemd-analyze security --no-pager %s | tail -1" % unit).stdout
                          .split(":")[1].split()[0])
            limit = next(value for prefix, value in EXPOSURE_LIMITS.items() if unit.startswith(prefix))
            table.append({"host": host, "unit": unit, "exposure": score, "limit": limit})
            if unit.startswith(("vllm-", "ray-")):
                shown = dict(line.split("=", 1) for line in ssh(host, "systemctl show -p User -p %s %s" % (
                    " -p ".join(REQUIRED), unit)).stdout.splitlines())
                assert {key: shown[key] for key in REQUIRED} == REQUIRED and shown["User"] not in ("", "root"), shown
    _save("systemd-analyze.json", table)
    rows = ["%-6s %-28s exposure %.1f (limit %.1f)" % (row["host"], row["unit"], row["exposure"], row["limit"])
            for row in table]
    print("\n" + "\n".join(rows))
    assert {row["unit"].split("-")[0] for row in table} >= {"vllm", "ray", "haproxy.service", "llmserve"}
    assert all(row["exposure"] <= row["limit"] for row in table), table


# Connects to one closed port from outside as fast as 16 threads can, until stdin closes (at most 600 s).
WATCH = textwrap.dedent("""
    import json, socket, sys, threading, time
    host, port = sys.argv[1], int(sys.argv[2])
    done, counts, lock = threading.Event(), {"attempts": 0, "connected": 0}, threading.Lock()
    def probe():
        while not done.is_set():
            sock = socket.socket()
            sock.settimeout(0.01)
            try:
                sock.connect((host, port))
                hit = 1
            except OSError:
                hit = 0
            finally:
                sock.close()
            with lock:
                counts["attempts"] += 1
                counts["connected"] += hit
    threads = [threading.Thread(target=probe, daemon=True) for _ in range(16)]
    for thread in threads:
        thread.start()
    print("watching", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(600)
    done.set()
    for thread in threads:
        thread.join(5)
    print(json.dumps(counts), flush=True)
""")
FIREWALL_PLAY = """- name: Apply the cluster firewall alone
  hosts: %s
  gather_facts: false
  roles:
    - role: llmserve.vllm_cluster.firewall
"""


def test_a_rules_change_leaves_no_moment_without_rules(outside, tmp_path):
    """The handler swaps the table in one nft transaction: a closed port never answers while the rules change."""
    host = NODES[-1]
    playbook = tmp_path / "firewall.yml"
    playbook.write_text(FIREWALL_PLAY % host)
    started = ssh(host, "systemctl show -p ActiveEnterTimestampMonotonic --value llmserve-firewall.service").stdout
    watcher = subprocess.Popen(["ip", "netns", "exec", NETNS, "python3", "-c", WATCH, address(host), "8000"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout.readline().strip() == "watching"
        runs = []
        # A documentation-only range as an extra trusted source, then back: the table is rewritten twice.
        for extra in ('["192.0.2.0/24"]', "[]"):
            run = subprocess.run(playbook_argv(str(playbook), os.path.join(REPO, "inventories", "sim"), "-e",
                                               '{"firewall_trusted_sources": %s}' % extra),
                                 cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
            assert run.returncode == 0, run.stdout[-3000:]
            runs.append(recap(run.stdout)[host]["changed"])
            listed = ssh(host, "nft list set inet llmserve cluster_v4").stdout
            assert ("192.0.2.0/24" in listed) == (extra != "[]"), listed
    finally:
        out, _err = watcher.communicate("", timeout=120)
    counts = json.loads(out.splitlines()[-1])
    restarted = ssh(host, "systemctl show -p ActiveEnterTimestampMonotonic --value llmserve-firewall.service").stdout
    _save("rules-change.json", dict(counts, host=host, port=8000, changed=runs))
    print("\n%s:8000 from outside while the rules changed twice: %d attempts, %d connected" % (
        host, counts["attempts"], counts["connected"]))
    assert all(changed >= 1 for changed in runs), runs
    assert counts["attempts"] > 1000, counts
    assert counts["connected"] == 0, counts
    assert restarted == started, "the firewall unit was restarted (stopped, then started) instead of reloaded"


def test_a_flushed_table_is_reported_by_drift_and_restored_by_a_re_deploy(tmp_path):
    """After `nft flush ruleset` every file and unit is as written: the role must read the kernel to notice."""
    host = NODES[-1]
    playbook = tmp_path / "firewall.yml"
    playbook.write_text(FIREWALL_PLAY % host)
    inventory = os.path.join(REPO, "inventories", "sim")

    def run(*args):
        done = subprocess.run(playbook_argv(str(playbook), inventory, *args), cwd=REPO, env=ansible_env(),
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-3000:]
        return recap(done.stdout)[host]["changed"]

    ssh(host, "nft flush ruleset")
    try:
        assert ssh(host, "nft list table inet llmserve", check=False).returncode != 0
        drift = run("--check")
        assert drift >= 1, "check mode reported no change with the table gone"
        assert ssh(host, "nft list table inet llmserve", check=False).returncode != 0, "check mode changed the host"
        restored = run()
    finally:
        # Whatever happened above, the host ends with its table (the unit's reload loads the same file).
        ssh(host, "nft list table inet llmserve >/dev/null 2>&1 || nft --file /etc/llmserve/firewall.nft")
    assert restored >= 1 and "chain input" in ssh(host, "nft list table inet llmserve").stdout
    assert run() == 0, "a run after the restore changed something"
    _save("flushed-table.json", {"host": host, "drift_changed": drift, "restore_changed": restored})


class _Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in hub on the controller's bridge address: records each request's Authorization header and refuses it."""

    seen = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append({"path": self.path, "authorization": self.headers.get("Authorization", "")})
        body = b'{"error": "stand-in hub"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_hub_token_reaches_the_hub_but_no_command_line_and_is_removed():
    """A real model_cache download on node3 (source hf, a revision not staged yet) against a stand-in hub that refuses
    it: huggingface_hub sends the token, which comes from a root-only file, while no process's command line on node3
    holds it during the run; staging fails cleanly and the token file is gone afterwards."""
    token = "hf_llmserveTestToken0123456789abcd"
    controller = address(NODES[0]).rsplit(".", 1)[0] + ".1"
    hub = http.server.ThreadingHTTPServer((controller, 0), _Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    extra = {"model_cache_source": "hf", "model_cache_hf_token": token, "model_cache_stage_host": "node3",
             "model_cache_hf_endpoint": "http://%s:%d" % (controller, hub.server_address[1]),
             "vllm_cluster_model": dict(GROUP_VARS["vllm_cluster_model"], revision="1" * 40)}
    argv = [os.path.join(os.path.dirname(playbook_argv("x")[0]), "ansible"), "node3", "-i", os.path.join(REPO, "inventories", "sim"),
            "-m", "ansible.builtin.include_role", "-a", "name=llmserve.vllm_cluster.model_cache", "-e", json.dumps(extra)]
    seen_on_cmdline = []
    try:
        run = subprocess.Popen(argv, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while run.poll() is None:
            found = ssh("node3", PATTERN + "grep -l -a -F -f $pat /proc/[0-9]*/cmdline 2>/dev/null; rm -f $pat",
                        stdin=token, check=False).stdout.split()
            seen_on_cmdline += found
        output = run.stdout.read()
    finally:
        hub.shutdown()
    assert run.returncode != 0 and "staging llmserve-sim/tiny-llama@" + "1" * 40 in output, output[-3000:]
    assert token not in output
    assert _Hub.seen and all(request["authorization"] == "Bearer " + token for request in _Hub.seen), _Hub.seen
    assert not seen_on_cmdline, seen_on_cmdline
    assert ssh("node3", "ls /run/llmserve-hf-token /srv/vllm-cache/.staging/*@%s 2>/dev/null" % ("1" * 40), check=False).stdout == ""
