# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a troubleshooting bundle's evidence and name the likely cause of the guide's five failure patterns.

Pure: the collect playbook gathers the evidence (schema below), this module only reasons over it.

evidence = {
  "plan": {"replicas": [{"name", "hosts", "tensor_parallel_size", "pipeline_parallel_size", "backend"}]},
  "nodes": {host: {
      "cluster_address": str, "interfaces": {ifname: [address, ...]}, "network_env": {NAME: value},
      "firewall": nft text or "", "units": {unit: {"active": str, "restarts": int}}, "log_tail": str,
      "model": {"path": str, "exists": bool, "verified": bool or None, "message": str},
      "gpus": [{"index", "name", "memory_total_mib", "memory_used_mib"}], "metrics": {replica: prometheus text},
      "ray": {"alive": [ip, ...]} (Ray head only), "errors": [str]}},
  "loadbalancer": {"servers": {name: {"status", "check_status", "sessions", "econ", "eresp", "wretr", "wredis",
                   "hrsp_5xx"}}, "timeouts": {name: seconds}, "no_delay": bool (option http-no-delay set),
                   "direct": {replica: http status}, "through_lb": http status},
}
"""

from __future__ import annotations

import csv
import ipaddress
import json
import re

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _haproxy

PATTERNS = (
    ("multi_node_hang", "A replica spanning nodes hangs or never becomes ready"),
    ("more_gpus_slower", "More GPUs made it slower"),
    ("one_gpu_oom", "One GPU runs out of memory"),
    ("long_prompt_latency", "Latency spikes on long prompts"),
    ("lb_only_failure", "Works against a replica directly, fails behind the load balancer"),
)
# Streams of a long generation outlive a short proxy timeout; below this a cut stream is likely.
MIN_STREAM_TIMEOUT_S = 300
OOM_USED_SHARE = 0.97
KV_PRESSURE = 0.9
_TIME_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Only in error or warning lines: the same words appear in healthy start-up logs ("backend=gloo").
_LOG_SIGNS = {
    "multi_node_hang": ("Connection closed by peer", "Connection refused", "NCCL error", "NCCL WARN", "timed out",
                        "Timed out", "DistNetworkError", "rendezvous"),
    "one_gpu_oom": ("CUDA out of memory", "OutOfMemoryError", "out of memory"),
}
_LOG_LEVELS = ("ERROR", "WARN", "Error", "Exception", "CRITICAL")


def parse_timeout(value):
    """HAProxy time ('10m', '500ms', '30') in seconds; None when unreadable."""
    match = re.fullmatch(r"\s*([0-9]+)\s*(ms|s|m|h|d)?\s*", str(value))
    if not match:
        return None
    return int(match.group(1)) * _TIME_UNITS[match.group(2) or "ms"]


def haproxy_timeouts(config_text):
    """{name: seconds} of every `timeout <name> <value>` line (the last one of each name wins)."""
    timeouts = {}
    for line in config_text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "timeout":
            seconds = parse_timeout(fields[2])
            if seconds is not None:
                timeouts[fields[1]] = seconds
    return timeouts


def parse_metrics(text):
    """Prometheus text to {name: summed value} and the prompt-length histogram {le: cumulative count}."""
    sums, buckets = {}, {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            series, value = line.rsplit(" ", 1)
            number = float(value)
        except ValueError:
            continue
        name = series.split("{", 1)[0]
        sums[name] = sums.get(name, 0.0) + number
        if name == "vllm:request_prompt_tokens_bucket":
            match = re.search(r'le="([^"]+)"', series)
            if match:
                buckets[match.group(1)] = buckets.get(match.group(1), 0.0) + number
    return sums, buckets


def prompt_buckets(buckets):
    """Cumulative histogram buckets to [(upper bound, requests in that bucket)], rising."""
    def bound(label):
        return float("inf") if label == "+Inf" else float(label)
    ordered = sorted(buckets.items(), key=lambda item: bound(item[0]))
    result, previous = [], 0.0
    for label, cumulative in ordered:
        result.append((label, int(cumulative - previous)))
        previous = cumulative
    return [entry for entry in result if entry[1] > 0]


def _log_hits(nodes, pattern):
    """The first error/warning line per node that carries one of the pattern's signs, cut to 200 characters."""
    hits = []
    for host, node in sorted(nodes.items()):
        for line in (node.get("log_tail") or "").splitlines():
            if any(level in line for level in _LOG_LEVELS) and any(sign in line for sign in _LOG_SIGNS[pattern]):
                hits.append("%s: its vLLM/Ray log says: %s" % (host, line.strip()[-200:]))
                break
    return hits


def _admitted(firewall, address):
    """Whether the firewall table's address sets (single, range a-b, CIDR) hold address; None when it lists none."""
    spans = re.findall(r"(\d+\.\d+\.\d+\.\d+(?:/\d+|-\d+\.\d+\.\d+\.\d+)?)", " ".join(
        re.findall(r"(?:elements = \{|ip saddr \{?)([^}\n]*)", firewall)))
    if not spans:
        return None
    wanted = ipaddress.ip_address(address)
    for span in spans:
        if "-" in span:
            low, high = (ipaddress.ip_address(part) for part in span.split("-"))
            if low <= wanted <= high:
                return True
        elif wanted in ipaddress.ip_network(span, strict=False):
            return True
    return False


def _multi_host(plan):
    return [replica for replica in plan.get("replicas", []) if len(replica.get("hosts", [])) > 1]


def multi_node_hang(evidence):
    nodes, plan = evidence.get("nodes", {}), evidence.get("plan", {})
    findings = []
    alive = next((node["ray"]["alive"] for node in nodes.values() if node.get("ray")), None)
    if alive is not None:
        missing = sorted(host for host, node in nodes.items() if node.get("cluster_address") not in alive)
        if missing:
            findings.append("Ray membership: %s not alive in the Ray cluster (alive: %s)" % (", ".join(missing), ", ".join(alive)))
    for host, node in sorted(nodes.items()):
        env, interfaces = node.get("network_env", {}), node.get("interfaces", {})
        ifname = env.get("GLOO_SOCKET_IFNAME") or env.get("NCCL_SOCKET_IFNAME", "").lstrip("=")
        if ifname and ifname not in interfaces:
            findings.append("%s: NCCL/Gloo interface %s does not exist (interfaces: %s)" % (host, ifname, ", ".join(sorted(interfaces))))
        elif ifname and node.get("cluster_address") not in interfaces.get(ifname, []):
            findings.append("%s: NCCL/Gloo interface %s does not hold the cluster address %s" % (host, ifname, node.get("cluster_address")))
        if env.get("VLLM_HOST_IP") and env["VLLM_HOST_IP"] != node.get("cluster_address"):
            findings.append("%s: VLLM_HOST_IP=%s is not its cluster address %s" % (host, env["VLLM_HOST_IP"], node.get("cluster_address")))
        for error in node.get("errors", []):
            findings.append("%s: %s" % (host, error))
    for replica in _multi_host(plan):
        unit = "vllm-%s.service" % replica["name"]
        states = {host: nodes.get(host, {}).get("units", {}).get(unit, {}).get("active", "unknown") for host in replica["hosts"]}
        if len(set(states.values())) > 1 or "failed" in states.values():
            findings.append("replica %s: its ranks differ (%s): a restarted rank does not rejoin the others" % (
                replica["name"], ", ".join("%s %s" % item for item in sorted(states.items()))))
        for host in replica["hosts"]:
            model = nodes.get(host, {}).get("model", {})
            if model and (not model.get("exists") or model.get("verified") is False):
                findings.append("replica %s: model path %s on %s: %s" % (
                    replica["name"], model.get("path"), host, model.get("message") or "missing"))
            firewall = nodes.get(host, {}).get("firewall", "")
            peers = [nodes.get(peer, {}).get("cluster_address") for peer in replica["hosts"] if peer != host]
            blocked = [peer for peer in peers if firewall and peer and _admitted(firewall, peer) is False]
            if blocked:
                findings.append("replica %s: %s's firewall table does not admit its peer(s) %s" % (replica["name"], host, ", ".join(blocked)))
    if _multi_host(plan):
        findings += _log_hits(nodes, "multi_node_hang")
    return findings


def more_gpus_slower(evidence):
    nodes, plan = evidence.get("nodes", {}), evidence.get("plan", {})
    findings = []
    for replica in plan.get("replicas", []):
        names = {gpu.get("name") for host in replica.get("hosts", []) for gpu in nodes.get(host, {}).get("gpus", [])}
        if len(names) > 1:
            findings.append("replica %s mixes GPU SKUs (%s): the slowest sets the pace of every stage" % (
                replica["name"], ", ".join(sorted(str(name) for name in names))))
        if int(replica.get("pipeline_parallel_size", 1)) > 1 and len(replica.get("hosts", [])) > 1:
            findings.append("replica %s runs pipeline parallelism across %d nodes (pp=%s): each token crosses the node "
                            "link; a smaller model or quantization that fits one NVLink island avoids it" % (
                                replica["name"], len(replica["hosts"]), replica["pipeline_parallel_size"]))
    for host, node in sorted(nodes.items()):
        env = node.get("network_env", {})
        for name in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE"):
            if str(env.get(name, "0")) == "1":
                findings.append("%s: %s=1 forces NCCL onto a slower path" % (host, name))
    return findings


def one_gpu_oom(evidence):
    nodes = evidence.get("nodes", {})
    findings = []
    for host, node in sorted(nodes.items()):
        for gpu in node.get("gpus", []):
            total, used = float(gpu.get("memory_total_mib") or 0), float(gpu.get("memory_used_mib") or 0)
            if total and used / total >= OOM_USED_SHARE:
                findings.append("%s GPU %s: %.0f of %.0f MiB used (%.0f%%)" % (host, gpu.get("index"), used, total, 100 * used / total))
    used_shares = [float(gpu["memory_used_mib"]) / float(gpu["memory_total_mib"])
                   for node in nodes.values() for gpu in node.get("gpus", []) if float(gpu.get("memory_total_mib") or 0)]
    if len(used_shares) > 1 and max(used_shares) - min(used_shares) > 0.2:
        findings.append("GPU memory is uneven across GPUs (%.0f%% to %.0f%% used): an uneven pipeline stage or a stray "
                        "process on one GPU" % (100 * min(used_shares), 100 * max(used_shares)))
    return findings + _log_hits(nodes, "one_gpu_oom")


def long_prompt_latency(evidence):
    findings = []
    for host, node in sorted(evidence.get("nodes", {}).items()):
        for replica, text in sorted((node.get("metrics") or {}).items()):
            sums, buckets = parse_metrics(text)
            kv = sums.get("vllm:kv_cache_usage_perc", sums.get("vllm:gpu_cache_usage_perc", 0.0))
            if kv >= KV_PRESSURE:
                findings.append("replica %s: KV cache %.0f%% full" % (replica, 100 * kv))
            if sums.get("vllm:num_requests_waiting", 0) > 0:
                findings.append("replica %s: %d request(s) waiting in vLLM's queue" % (replica, sums["vllm:num_requests_waiting"]))
            if sums.get("vllm:num_preemptions_total", 0) > 0:
                findings.append("replica %s: %d preemption(s) (KV cache pressure evicts running requests)" % (
                    replica, sums["vllm:num_preemptions_total"]))
            spread = prompt_buckets(buckets)
            if findings and spread:
                findings.append("replica %s: requests by prompt length (tokens <= bound: count): %s" % (
                    replica, ", ".join("%s: %d" % item for item in spread)))
    return findings


def lb_only_failure(evidence):
    balancer = evidence.get("loadbalancer") or {}
    findings = []
    direct = balancer.get("direct", {})
    for name, server in sorted((balancer.get("servers") or {}).items()):
        status = str(server.get("status", ""))
        if not status.startswith("UP") and direct.get(name) == 200:
            findings.append("HAProxy has %s %s (check: %s) while it answers directly" % (name, status, server.get("check_status", "")))
        for counter, meaning in (("econ", "connection errors"), ("eresp", "response errors"), ("wretr", "retries"),
                                 ("wredis", "redispatches"), ("hrsp_5xx", "5xx answers")):
            if int(server.get(counter) or 0) > 0:
                findings.append("HAProxy %s: %s %s" % (name, server[counter], meaning))
    for name in ("server", "client"):
        seconds = (balancer.get("timeouts") or {}).get(name)
        if seconds is not None and seconds < MIN_STREAM_TIMEOUT_S:
            findings.append("HAProxy timeout %s is %g s: a stream longer than that is cut" % (name, seconds))
    if balancer.get("no_delay") is False:
        findings.append("HAProxy lacks option http-no-delay: it corks streamed tokens up to 200 ms "
                        "(TTFT through the balancer above direct, tokens in bursts)")
    through = balancer.get("through_lb")
    if through not in (None, 200) and 200 in direct.values():
        findings.append("through the load balancer the API answers %s, directly 200" % through)
    return findings


def _interfaces(text):
    try:
        links = json.loads(text)
    except ValueError:
        return {}
    return {link.get("ifname"): [addr.get("local") for addr in link.get("addr_info", [])] for link in links if isinstance(link, dict)}


def _env(text):
    env = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip('"')
    return env


def _units(text):
    units = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].endswith(".service"):
            units[fields[0]] = {"load": fields[1], "active": fields[2], "sub": fields[3]}
    return units


def _gpus(text):
    gpus = []
    for row in csv.reader(text.splitlines()):
        if len(row) >= 4 and row[0].strip().isdigit():
            try:
                gpus.append({"index": int(row[0]), "name": row[1].strip(), "memory_total_mib": float(row[2]),
                             "memory_used_mib": float(row[3])})
            except ValueError:
                continue
    return gpus


def _failed(text):
    return text.startswith("failed (rc")


def normalize_node(raw):
    """One node's raw captures (playbooks/collect.yml) in the schema analyse() reads."""
    captures = raw.get("captures") or {}

    def capture(name):
        text = captures.get(name, "")
        return "" if _failed(text) else text
    model = raw.get("model") or {}
    message = model.get("message", "")
    ray = {}
    if raw.get("ray"):
        try:
            ray = json.loads(raw["ray"])
        except ValueError:
            ray = {}
    return {
        "cluster_address": raw.get("cluster_address", ""),
        "interfaces": _interfaces(capture("addresses.json")),
        "network_env": _env(capture("network.env")),
        "firewall": capture("firewall.nft"),
        "units": _units(capture("units.txt")),
        "log_tail": capture("journal.txt")[-20000:],
        "model": {"path": model.get("path", ""), "verified": bool(model.get("verified")), "message": message,
                  "exists": bool(model.get("verified")) or "cannot read model directory" not in message},
        "gpus": _gpus(capture("gpus.csv")),
        "metrics": raw.get("metrics") or {},
        "ray": ray,
        "errors": list(raw.get("errors") or []) + ["%s: %s" % (name, text[:300]) for name, text in sorted(captures.items())
                                                   if _failed(text) and name in ("network.env", "units.txt")],
    }


def haproxy_servers(stat_csv, backend):
    """{server: {status, check_status, sessions, econ, eresp, wretr, wredis, hrsp_5xx}} of one backend."""
    if not (stat_csv or "").strip():
        return {}
    servers = {}
    for row in _haproxy.stat_rows(stat_csv):
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND"):
            servers[row["svname"]] = {"status": row.get("status", ""), "check_status": row.get("check_status", ""),
                                      "sessions": int(row.get("scur") or 0),
                                      **{key: int(row.get(key) or 0) for key in ("econ", "eresp", "wretr", "wredis", "hrsp_5xx")}}
    return servers


def normalize(evidence, haproxy_config=""):
    """The collect playbook's raw evidence in the schema of this module's docstring."""
    balancer = dict(evidence.get("loadbalancer") or {})
    if "servers" not in balancer:
        balancer["servers"] = haproxy_servers(balancer.pop("stat_csv", ""), balancer.get("backend", "vllm_replicas"))
    if not balancer.get("timeouts"):
        balancer["timeouts"] = haproxy_timeouts(haproxy_config)
    if "no_delay" not in balancer and haproxy_config:
        balancer["no_delay"] = bool(re.search(r"^\s*option\s+http-no-delay\b", haproxy_config, re.M))
    nodes = {host: normalize_node(raw) if "captures" in (raw or {}) else
             (raw or {"errors": ["no evidence collected (the host was unreachable or its probes did not run)"]})
             for host, raw in (evidence.get("nodes") or {}).items()}
    return {"plan": evidence.get("plan") or {}, "nodes": nodes, "loadbalancer": balancer}


def analyse(evidence):
    """[{pattern, title, likely, findings}] for the five patterns, likely ones first."""
    checks = {"multi_node_hang": multi_node_hang, "more_gpus_slower": more_gpus_slower, "one_gpu_oom": one_gpu_oom,
              "long_prompt_latency": long_prompt_latency, "lb_only_failure": lb_only_failure}
    results = []
    for key, title in PATTERNS:
        findings = checks[key](evidence)
        results.append({"pattern": key, "title": title, "likely": bool(findings), "findings": findings})
    return sorted(results, key=lambda entry: not entry["likely"])


def render_markdown(results, bundle_name=""):
    lines = ["# Troubleshooting summary%s" % (" (%s)" % bundle_name if bundle_name else ""), ""]
    likely = [entry for entry in results if entry["likely"]]
    lines.append("Likely: %s" % (", ".join(entry["title"] for entry in likely) if likely else "none of the five patterns"))
    for entry in results:
        lines += ["", "## %s: %s" % (entry["title"], "LIKELY" if entry["likely"] else "not indicated")]
        lines += ["- %s" % finding for finding in entry["findings"]] or ["- nothing in the evidence points here"]
    return "\n".join(lines) + "\n"
