"""How long the collection keeps its users waiting, measured on the simulated cluster (tests/sim/rig.sh).

P1  cold deploy.yml on fresh hosts to the first token through HAProxy, against the sum of its unavoidable parts
    done by hand on other fresh hosts in the same run: the venv install, the model staging, a bare `vllm serve`
    of every replica to its first token (same arguments and environment as the deployed units).
P2  a no-op re-run of deploy.yml: wall time and changed count at 3, 6 and 12 hosts (nodes past node3 are spare
    GPU nodes: driver, runtime, network, firewall, model cache and Ray, no replica; the 2-core machine cannot
    hold more vLLM servers). Beside it, the same no-op with Mitogen's strategy (scripts/mitogen-env.sh).
P3  restart-to-ready of replica r1 (systemctl restart; SIGKILL of its main process) against a bare start of the
    same command line.
P4  output tok/s of one load shape sent by `vllm bench serve` run directly on the client host against the same
    load through the acceptance stage (acceptance.yml, sweep at one concurrency).

  python3 tests/perf/bench.py --short   on the rig that is up and deployed (CI): P2 at its size, P3, P4
  python3 tests/perf/bench.py           every figure, on fresh rigs it brings up and takes down itself (about 40 min)

Prints a table with the goals beside the figures, writes artifacts/perf/<UTC time>.json, asserts nothing
about time. The rig's hosts stand in for GPU hosts and share this machine's cores: read the figures as ratios.
"""

import argparse
import datetime
import glob
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time

import importlib.util
import threading

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The live tests' way of reaching the rig (SSH with its key and pinned host keys, the play recap, HAProxy's stats).
_SPEC = importlib.util.spec_from_file_location("sim_hosts", os.path.join(REPO, "tests", "live", "sim_hosts.py"))
sim_hosts = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sim_hosts)
RIG = os.path.join(REPO, "tests", "sim", "rig.sh")
INVENTORY = os.environ.get("LLMSERVE_SIM_INVENTORY", os.path.join(REPO, "inventories", "sim", "hosts.yml"))
GOALS = {
    "P1": "<= 1.25", "P2_changed": "0", "P2_3": "<= 20 s", "P2_scale": "<= 1.3",
    "P2_cost": "<= 25 modules, <= 3 s CPU per host",
    "P3": "<= 1.2", "P4": "within 5 %",
}
# P4's load: below the sim's knee, long enough (about 20 s) that one run is representative.
P4_LOAD = {"concurrency": 4, "input_len": 64, "output_len": 64, "num_prompts": 48}
P3_REPLICA = "r1"


def log(text):
    print("bench: %s" % text, file=sys.stderr, flush=True)


class Rig:
    """The rig's hosts, reached over SSH with the rig's key; scripts go on stdin so nothing lands in argv."""

    def __init__(self):
        hosts, self.vars = sim_hosts.load_inventory()
        self.hosts = {name: spec["ansible_host"] for name, spec in hosts["all"]["children"]["vllm_nodes"]["hosts"].items()}
        self.lb = sim_hosts.load_balancer()
        self.key = self.vars["vllm_cluster_api_key"]
        self.model = self.vars["vllm_cluster_model"]["served_name"]
        self.replicas = {r["name"]: r for r in self.vars["vllm_cluster_replicas"]}

    @staticmethod
    def ssh(host, script, timeout=900, check=True):
        """Run a bash script on host (on stdin, so nothing lands in argv); returns its stdout."""
        return sim_hosts.ssh(host, "bash -s", stdin=script, timeout=timeout, check=check).stdout

    def url(self, replica):
        return "http://%s:%s" % (self.hosts[self.replicas[replica]["hosts"][0]], self.replicas[replica].get("port", 8000))

    def first_token(self, base_url, started, timeout=300):
        """Seconds from `started` until base_url answers a one-token completion, polled every 0.5 s from the
        load balancer host (the firewall keeps vLLM's port to the cluster network)."""
        body = json.dumps({"model": self.model, "prompt": "hello", "max_tokens": 1})
        script = (
            "umask 077; cat > /run/bench-probe.hdr <<'HDR'\nAuthorization: Bearer %s\nContent-Type: application/json\nHDR\n"
            "end=$((SECONDS + %d))\n"
            "until curl -sf -o /dev/null -m 30 -H @/run/bench-probe.hdr -d %s %s/v1/completions; do\n"
            "  [ $SECONDS -lt $end ] || { rm -f /run/bench-probe.hdr; exit 1; }; sleep 0.5\ndone\nrm -f /run/bench-probe.hdr\n"
        ) % (self.key, timeout, shlex.quote(body), base_url)
        if sim_hosts.ssh(self.lb, "bash -s", stdin=script, timeout=timeout + 60, check=False).returncode != 0:
            raise RuntimeError("%s gave no token in %d s" % (base_url, timeout))
        return time.monotonic() - started

    def wait_balanced(self, timeout=180):
        """Wait until HAProxy has every replica UP again (P3 restarts one), so later tests find the service whole."""
        deadline = time.monotonic() + timeout
        while any(sim_hosts.haproxy_status(name) != "UP" for name in self.replicas):
            if time.monotonic() > deadline:
                raise RuntimeError("HAProxy did not put every replica back in %d s" % timeout)
            time.sleep(1)


def rig(*args):
    subprocess.run([RIG] + list(args), check=True, stdout=subprocess.DEVNULL)


def fresh_rig(count):
    rig("down")
    rig("up", str(count))
    return Rig()


LOGS = []   # [directory]: where each playbook's whole output goes, set by main()


COSTS = []  # [{"cpu_s": controller CPU seconds, "modules": {host: module executions}}] of each playbook run, in order


def playbook(name, *args, strategy=None):
    """Run one playbook; returns (seconds, {host: changed}). Its output is kept in the run's directory; what it cost
    the controller (CPU of ansible-playbook, its forks and SSH clients; module executions per host) goes to COSTS.
    strategy "mitogen" runs it with Mitogen's linear strategy (what scripts/mitogen-env.sh sets)."""
    argv = ["ansible-playbook", os.path.join(REPO, "playbooks", name), "-i", INVENTORY] + list(args)
    counts = os.path.join(LOGS[0] if LOGS else "/tmp", ".module-count.json")
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=os.path.join(REPO, "tests", "perf", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="module_count", LLMSERVE_MODULE_COUNT_FILE=counts)
    if strategy == "mitogen":
        # What the documented `source scripts/mitogen-env.sh` exports, from the script itself.
        exported = subprocess.run(["bash", "-c", "source scripts/mitogen-env.sh && env"], cwd=REPO, env=env,
                                  capture_output=True, text=True, check=True).stdout
        env.update(line.split("=", 1) for line in exported.splitlines() if line.startswith("ANSIBLE_STRATEGY"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, env=env)
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    modules = {}
    if os.path.exists(counts):
        with open(counts) as handle:
            modules = {host: entry["modules"] for host, entry in json.load(handle).items()}
        os.replace(counts, counts.replace(".module-count", "%02d-%s.modules" % (len(COSTS), name.replace(".yml", ""))))
    COSTS.append({"cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1), "modules": modules})
    if LOGS:
        path = os.path.join(LOGS[0], "%02d-%s.log" % (len(os.listdir(LOGS[0])), name.replace(".yml", "")))
        with open(path, "w") as handle:
            handle.write(proc.stdout + proc.stderr)
    recap = changed_per_host(proc.stdout)
    if proc.returncode != 0 or not recap:
        raise RuntimeError("%s: exit %s\n%s" % (name, proc.returncode, proc.stdout[-4000:] + proc.stderr[-2000:]))
    return seconds, recap


def changed_per_host(stdout):
    """{host: changed} from ansible-playbook's PLAY RECAP."""
    return {host: counts["changed"] for host, counts in sim_hosts.recap(stdout).items()}


def parse_unit(text):
    """(argv of ExecStart, [EnvironmentFile paths], {Environment name: value}) of a unit file's text."""
    joined = re.sub(r"\\\n", " ", text)
    exec_start = re.search(r"^ExecStart=(.*)$", joined, re.M).group(1)
    env_files = re.findall(r"^EnvironmentFile=-?(\S+)$", joined, re.M)
    env = dict(re.findall(r"^Environment=(\w+)=(\S*)$", joined, re.M))
    return shlex.split(exec_start), env_files, env


def unit_command(rig_, replica, host):
    """The replica's ExecStart on host and the environment systemd gives it, read from the deployed unit."""
    argv, env_files, env = parse_unit(rig_.ssh(host, "cat /etc/systemd/system/vllm-%s.service" % replica))
    env_text = rig_.ssh(host, "cat %s 2>/dev/null || true" % " ".join(shlex.quote(f) for f in env_files))
    return {"argv": argv, "env_text": env_text, "env": env}


def bare_start(rig_, host, command, as_user=None, tag="bare"):
    """Start a unit's command line by hand, detached; returns the PID. The environment goes through a 0600 file."""
    env_lines = command["env_text"] + "".join("%s=%s\n" % item for item in command["env"].items())
    run_as = "setpriv --reuid=%s --regid=%s --init-groups " % (as_user, as_user) if as_user else ""
    script = (
        "umask 077; cat > /run/%s.env <<'ENV'\n%sENV\n"
        "set -a; . /run/%s.env; set +a; rm -f /run/%s.env\n"
        "cd /tmp; %ssetsid %s > /tmp/%s.log 2>&1 < /dev/null & echo $!\n"
    ) % (tag, env_lines, tag, tag, run_as, " ".join(shlex.quote(a) for a in command["argv"]), tag)
    return int(rig_.ssh(host, script).strip())


def stop_bare(rig_, host, pid, port=None):
    """End what bare_start started (its session, by PID) and wait until its port is free."""
    wait_port = ("for _ in $(seq 120); do ss -ltn 'sport = :%d' | grep -q LISTEN || exit 0; sleep 0.5; done; exit 1" % port
                 if port else "exit 0")
    rig_.ssh(host, "kill -TERM -- -%d 2>/dev/null; for _ in $(seq 60); do kill -0 %d 2>/dev/null || break; sleep 0.5; done;"
                   " kill -KILL -- -%d 2>/dev/null; %s" % (pid, pid, pid, wait_port))


# --- P1 --------------------------------------------------------------------------------------------------------

def capture_units(rig_):
    """Every replica's command lines (head rank first), to replay by hand on bare hosts."""
    return {name: [(host, unit_command(rig_, name, host)) for host in replica["hosts"]]
            for name, replica in rig_.replicas.items()}


def hand_parts(rig_, units):
    """The unavoidable parts of a deployment, by hand on fresh hosts, each measured on its own."""
    lock = _inventory_var("vllm_runtime_lock_file")
    links = _inventory_var("vllm_cluster_pip_find_links")
    venv = units[P3_REPLICA][0][1]["argv"][0].rsplit("/bin/", 1)[0]
    version = rig_.vars["vllm_cluster_vllm_version"]
    with open(lock) as handle:
        lock_text = handle.read()
    install = (
        "set -e; python3 -m venv {venv}; cat > /tmp/requirements.lock <<'LOCK'\n{lock}LOCK\n"
        "{venv}/bin/pip install -q --no-deps --no-index --find-links {links} --trusted-host {host} -r /tmp/requirements.lock\n"
        "site=$({venv}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')\n"
        "mkdir -p $site/vllm-{version}+cpu.dist-info\n"
        "printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: {version}+cpu\\n' > $site/vllm-{version}+cpu.dist-info/METADATA\n"
    ).format(venv=venv, lock=lock_text, links=links, host=re.sub(r"^https?://([^:/]+).*", r"\1", links), version=version)
    figures = {"install_s": _parallel(rig_, install, list(rig_.hosts))}

    model_path = units[P3_REPLICA][0][1]["argv"][2]
    source = rig_.vars["model_cache_source_path"]
    staging = "set -e; mkdir -p %s; cp -a %s/. %s/; cd %s && find . -type f -print0 | xargs -0 sha256sum > /dev/null" % (
        model_path, source, model_path, model_path)
    started = time.monotonic()
    rig_.ssh(rig_.replicas[P3_REPLICA]["hosts"][0], staging)
    verify = "cd %s && find . -type f -print0 | xargs -0 sha256sum > /dev/null" % model_path
    _parallel(rig_, verify, list(rig_.hosts))
    figures["staging_s"] = time.monotonic() - started

    started = time.monotonic()
    # As root with its own HOME: the service user and its state directory are the deployment's, not a bare start's.
    pids = [(host, bare_start(rig_, host, dict(command, env={}))) for commands in units.values() for host, command in commands]
    figures["serve_s"] = max(rig_.first_token(rig_.url(name), started) for name in rig_.replicas)
    for host, pid in pids:
        stop_bare(rig_, host, pid)
    figures["sum_s"] = figures["install_s"] + figures["staging_s"] + figures["serve_s"]
    return figures


def _parallel(rig_, script, hosts):
    """Run script on every host at once; seconds until the last one ends."""
    started, errors = time.monotonic(), []

    def one(host):
        try:
            rig_.ssh(host, script, timeout=1800)
        except (AssertionError, subprocess.SubprocessError) as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=one, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return time.monotonic() - started


def _inventory_var(name):
    return sim_hosts.load_inventory()[0]["all"]["vars"][name]


# --- P2 --------------------------------------------------------------------------------------------------------

def noop(runs=2, strategy=None):
    """A no-op deploy.yml, twice: (fastest seconds, every run's seconds, most changed on any host)."""
    times, changed, cpu, modules = [], 0, [], {}
    for _unused in range(runs):
        seconds, recap = playbook("deploy.yml", strategy=strategy)
        times.append(round(seconds, 1))
        changed = max(changed, *recap.values())
        cpu.append(COSTS[-1]["cpu_s"])
        modules = COSTS[-1]["modules"]
    hosts = max(len(recap), 1)
    nodes = [count for host, count in modules.items() if host in recap]
    return {"seconds": min(times), "runs": times, "changed": changed, "controller_cpu_s": min(cpu),
            "controller_cpu_s_per_host": round(min(cpu) / hosts, 2), "modules_per_host": modules,
            "modules_per_host_max": max(nodes) if nodes else None}


# --- P3 --------------------------------------------------------------------------------------------------------

def restart_to_ready(rig_):
    host = rig_.replicas[P3_REPLICA]["hosts"][0]
    unit = "vllm-%s.service" % P3_REPLICA
    command = unit_command(rig_, P3_REPLICA, host)
    port = int(rig_.replicas[P3_REPLICA].get("port", 8000))
    url = rig_.url(P3_REPLICA)
    rig_.ssh(host, "systemctl stop %s" % unit)
    bare = []
    try:
        for _unused in range(2):
            started = time.monotonic()
            pid = bare_start(rig_, host, command, as_user="vllm")
            try:
                bare.append(rig_.first_token(url, started))
            finally:
                stop_bare(rig_, host, pid, port)
    finally:
        rig_.ssh(host, "systemctl start %s" % unit)
    rig_.first_token(url, time.monotonic())
    started = time.monotonic()
    rig_.ssh(host, "systemctl restart %s" % unit)
    restart = rig_.first_token(url, started)
    started = time.monotonic()
    rig_.ssh(host, "systemctl kill --signal=SIGKILL --kill-whom=main %s" % unit)
    killed = rig_.first_token(url, started)
    base = statistics.mean(bare)
    return {"bare_s": [round(b, 1) for b in bare], "restart_s": round(restart, 1), "sigkill_s": round(killed, 1),
            "restart_ratio": restart / base, "sigkill_ratio": killed / base}


# --- P4 --------------------------------------------------------------------------------------------------------

def client_overhead(rig_, artifacts, rounds=2):
    """The same load directly and through the acceptance stage, alternating (direct, stage) `rounds` times: runs on
    these shared cores differ by about 10 % from one to the next, so each side is the mean of its runs."""
    lb_url = "http://%s:%s" % (rig_.hosts[rig_.lb], rig_.vars.get("loadbalancer_port", 8080))
    bench = units_runtime(rig_) + "/bin/vllm"
    tokenizer = unit_command(rig_, P3_REPLICA, rig_.replicas[P3_REPLICA]["hosts"][0])["argv"][2]
    extra = {"acceptance_stages": ["sweep"], "acceptance_sweep_concurrency": [P4_LOAD["concurrency"]],
             "acceptance_sweep_input_len": P4_LOAD["input_len"], "acceptance_sweep_output_len": P4_LOAD["output_len"],
             "acceptance_sweep_prompts_per_slot": P4_LOAD["num_prompts"] // P4_LOAD["concurrency"],
             "acceptance_sweep_min_prompts": P4_LOAD["num_prompts"], "vllm_cluster_artifacts_dir": artifacts}
    direct, stage = [], []
    _bench_direct(rig_, bench, lb_url, tokenizer)   # warm-up, not counted
    for _unused in range(rounds):
        direct.append(_bench_direct(rig_, bench, lb_url, tokenizer))
        before = set(glob.glob(os.path.join(artifacts, "acceptance", "*", "report.json")))
        playbook("acceptance.yml", "-e", json.dumps(extra))
        report_path = sorted(set(glob.glob(os.path.join(artifacts, "acceptance", "*", "report.json"))) - before)[-1]
        with open(report_path) as handle:
            step = json.load(handle)["stages"]["sweep"]["ladder"][0]
        stage.append({"tok_s": step["output_tokens_per_s"], "ttft_p50_ms": step["ttft_ms"]["p50"]})
    return {"direct_tok_s": [round(d["tok_s"], 1) for d in direct], "stage_tok_s": [round(s["tok_s"], 1) for s in stage],
            "direct_ttft_p50_ms": [round(d["ttft_p50_ms"]) for d in direct],
            "stage_ttft_p50_ms": [round(s["ttft_p50_ms"]) for s in stage],
            "ratio": statistics.mean(s["tok_s"] for s in stage) / statistics.mean(d["tok_s"] for d in direct)}


def units_runtime(rig_):
    argv = unit_command(rig_, P3_REPLICA, rig_.replicas[P3_REPLICA]["hosts"][0])["argv"]
    return argv[0].rsplit("/bin/", 1)[0]


def _bench_direct(rig_, bench, base_url, tokenizer):
    argv = [bench, "bench", "serve", "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", rig_.model, "--tokenizer", tokenizer, "--dataset-name", "random",
            "--random-input-len", str(P4_LOAD["input_len"]), "--random-output-len", str(P4_LOAD["output_len"]),
            "--num-prompts", str(P4_LOAD["num_prompts"]), "--max-concurrency", str(P4_LOAD["concurrency"]),
            "--ignore-eos", "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", "/tmp",
            "--result-filename", "bench-direct.json"]
    script = ("umask 077; cat > /run/bench.env <<'ENV'\nOPENAI_API_KEY=%s\nHF_HUB_OFFLINE=1\nENV\n"
              "set -a; . /run/bench.env; set +a; rm -f /run/bench.env /tmp/bench-direct.json\n"
              "cd /tmp && %s > /tmp/bench-direct.log 2>&1 && cat /tmp/bench-direct.json\n") % (
        rig_.key, " ".join(shlex.quote(a) for a in argv))
    result = json.loads(rig_.ssh(rig_.lb, script))
    return {"tok_s": result["output_throughput"], "ttft_p50_ms": result["median_ttft_ms"]}


# --- table -----------------------------------------------------------------------------------------------------

def table(figures):
    rows = []
    p1 = figures.get("P1")
    if p1:
        rows.append(("P1 cold deploy -> first token / hand parts", "%.0f s / %.0f s (install %.0f, staging %.1f, serve %.0f)"
                     % (p1["deploy_s"], p1["hand"]["sum_s"], p1["hand"]["install_s"], p1["hand"]["staging_s"],
                        p1["hand"]["serve_s"]), "%.2f" % p1["ratio"], GOALS["P1"]))
    else:
        rows.append(("P1 cold deploy -> first token / hand parts", "not run (full mode only)", "-", GOALS["P1"]))
    p2 = figures["P2"]
    if not p2["hosts"]:
        rows.append(("P2 no-op deploy.yml", "not run", "-", GOALS["P2_3"] + ", changed 0"))
    for count in sorted(p2["hosts"], key=int):
        entry = p2["hosts"][count]
        rows.append(("P2 no-op deploy.yml, %s hosts" % count, "%.1f s (runs %s), changed %d" % (
            entry["seconds"], ", ".join("%.1f" % t for t in entry["runs"]), entry["changed"]),
            "%.1f s" % entry["seconds"], GOALS["P2_3"] + ", changed 0" if count == "3" else "changed 0"))
        if "controller_cpu_s" in entry:
            rows.append(("P2 no-op, %s hosts: module runs per host (most), controller CPU" % count, "%s; %.1f s CPU" % (
                ", ".join("%s %d" % item for item in sorted(entry["modules_per_host"].items())), entry["controller_cpu_s"]),
                "%s; %.2f s/host" % (entry["modules_per_host_max"], entry["controller_cpu_s_per_host"]), GOALS["P2_cost"]))
    for count, entry in sorted(p2.get("mitogen", {}).items(), key=lambda item: int(item[0])):
        default = p2["hosts"].get(count)
        rows.append(("P2 no-op, %s hosts, Mitogen strategy: wall, CPU, changed" % count, "%.1f s; %.1f s CPU; changed %d" % (
            entry["seconds"], entry["controller_cpu_s"], entry["changed"]),
            "%.2f of default wall" % (entry["seconds"] / default["seconds"]) if default else "-", "faster, changed 0"))
    if "scale_12_3" in p2:
        rows.append(("P2 no-op 12 hosts / 3 hosts", "", "%.2f" % p2["scale_12_3"], GOALS["P2_scale"]))
    if "cpu_scale_12_3" in p2:
        rows.append(("P2 no-op 12 hosts / 3 hosts, controller CPU", "", "%.2f" % p2["cpu_scale_12_3"], "-"))
    p3 = figures.get("P3")
    if not p3:
        rows.append(("P3 restart -> first token / bare start", "not run", "-", GOALS["P3"]))
    else:
        rows += _p3_rows(p3)
    p4 = figures.get("P4")
    if not p4:
        rows.append(("P4 out tok/s acceptance stage / direct bench", "not run", "-", GOALS["P4"]))
    else:
        rows.append(("P4 out tok/s acceptance stage / direct bench", "%s / %s" % (
            " & ".join("%.1f" % t for t in p4["stage_tok_s"]), " & ".join("%.1f" % d for d in p4["direct_tok_s"])),
            "%.3f" % p4["ratio"], GOALS["P4"]))
    widths = [max(len(str(row[i])) for row in rows + [("", "", "", "")]) for i in range(4)]
    header = ("measure", "figures", "result", "goal")
    widths = [max(w, len(h)) for w, h in zip(widths, header)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _p3_rows(p3):
    return [
        ("P3 systemctl restart -> first token / bare start", "%.1f s / %s s" % (
            p3["restart_s"], " & ".join("%.1f" % b for b in p3["bare_s"])), "%.2f" % p3["restart_ratio"], GOALS["P3"]),
        ("P3 SIGKILL -> first token / bare start", "%.1f s" % p3["sigkill_s"], "%.2f" % p3["sigkill_ratio"], GOALS["P3"]),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--short", action="store_true", help="P2 at the rig's size, P3, P4 on the rig that is up (CI)")
    parser.add_argument("--only", default="P2,P3,P4", help="with --short: which of P2,P3,P4 to run (default all)")
    parser.add_argument("--p1", action="store_true", help="only P1 (two fresh 3-host rigs, about 10 min)")
    parser.add_argument("--sizes", default="3,6,12", help="host counts for P2 in full mode (default 3,6,12)")
    args = parser.parse_args()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    artifacts = os.path.join(REPO, "artifacts", "perf", stamp)
    os.makedirs(os.path.join(artifacts, "logs"), exist_ok=True)
    LOGS.append(os.path.join(artifacts, "logs"))
    figures = {"machine": _machine(), "mode": "short" if args.short else "full", "P2": {"hosts": {}}}

    only = set(args.only.split(",")) if args.short else {"P2", "P3", "P4"}
    if args.p1:
        only = set()
    if args.short:
        current = Rig()
        if "P2" in only:
            log("P2: no-op deploy on %d hosts" % len(current.hosts))
            figures["P2"]["hosts"][str(len(current.hosts))] = noop(runs=1)
            log("P2: the same no-op deploy with Mitogen's strategy")
            figures["P2"]["mitogen"] = {str(len(current.hosts)): noop(runs=1, strategy="mitogen")}
    else:
        sizes = [3] if args.p1 else [int(size) for size in args.sizes.split(",")]
        log("P1/P2: cold deploy on 3 fresh hosts")
        current = fresh_rig(3)
        deploy_s, _unused = playbook("deploy.yml")
        if not args.p1:
            figures["P2"]["hosts"]["3"] = noop()
            figures["P2"]["hosts"]["3"]["cold_deploy_s"] = round(deploy_s, 1)
            figures["P2"]["mitogen"] = {"3": noop(strategy="mitogen")}
        units = capture_units(current)
    # P4 before P3: the first requests after a restart run slower (vLLM traces new batch shapes), which P4 would measure.
    if "P4" in only:
        log("P4: the acceptance client's overhead")
        figures["P4"] = client_overhead(current, artifacts)
    if "P3" in only:
        log("P3: restart-to-ready of %s" % P3_REPLICA)
        figures["P3"] = restart_to_ready(current)
        current.wait_balanced()
    if not args.short:
        # Each phase on its own: one that fails is reported and the others still run.
        try:
            log("P1: the same parts by hand on 3 fresh hosts")
            hand = hand_parts(fresh_rig(3), units)
            figures["P1"] = {"deploy_s": deploy_s, "hand": hand, "ratio": deploy_s / hand["sum_s"]}
        except (AssertionError, RuntimeError, subprocess.SubprocessError, OSError, KeyError) as exc:
            figures["errors"] = figures.get("errors", []) + ["P1: %s" % exc]
        for size in [s for s in sizes if s != 3]:
            log("P2: cold deploy, then no-op, on %d fresh hosts" % size)
            try:
                fresh_rig(size)
                cold_s, _unused = playbook("deploy.yml")
                figures["P2"]["hosts"][str(size)] = dict(noop(), cold_deploy_s=round(cold_s, 1))
            except (AssertionError, RuntimeError, subprocess.SubprocessError, OSError) as exc:
                figures["errors"] = figures.get("errors", []) + ["P2 at %d hosts: %s" % (size, str(exc)[-2000:])]
        rig("down")
        sizes_done = figures["P2"]["hosts"]
        if "12" in sizes_done and "3" in sizes_done:
            figures["P2"]["scale_12_3"] = sizes_done["12"]["seconds"] / sizes_done["3"]["seconds"]
            figures["P2"]["cpu_scale_12_3"] = sizes_done["12"]["controller_cpu_s"] / sizes_done["3"]["controller_cpu_s"]

    with open(os.path.join(artifacts, "perf.json"), "w") as handle:
        json.dump(figures, handle, indent=1, sort_keys=True)
    print(table(figures))
    for error in figures.get("errors", []):
        print("not measured: %s" % error)
    print("machine: %s" % figures["machine"])
    print("figures: %s" % os.path.join(artifacts, "perf.json"))
    # Time is only reported; a no-op that changed something is a defect.
    changed = {count: entry["changed"] for count, entry in figures["P2"]["hosts"].items() if entry["changed"]}
    if changed:
        print("a no-op deploy.yml changed something (hosts: changed): %s" % changed)
        return 1
    return 1 if figures.get("errors") else 0


def _machine():
    cpus = os.cpu_count()
    with open("/proc/meminfo") as handle:
        mem_gib = int(handle.readline().split()[1]) / 1024 / 1024
    return "%d cores, %.0f GiB, %s" % (cpus, mem_gib, os.uname().release)


if __name__ == "__main__":
    sys.exit(main())
