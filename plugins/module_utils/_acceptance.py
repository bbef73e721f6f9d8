# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The acceptance report: summaries of `vllm bench serve` results, the concurrency knee, SLO gates,
and the Markdown/HTML renderings. Pure: no I/O; the acceptance_report module writes the files.

Inputs are what the acceptance role collects: per load, loadgen's summary (``steps`` with vLLM's own
``--save-result`` JSON under ``bench`` and /metrics samples per replica under ``metrics``); per stage
the records of the cold-load, failure and restart tasks.
"""

from __future__ import annotations

import html

SCHEMA_VERSION = 1
STAGES = ("topology", "cold_load", "short_prompt", "long_prompt", "sweep", "heavy_output", "failure", "restart")
LOAD_STAGES = ("short_prompt", "long_prompt", "heavy_output")
_LATENCIES = ("ttft", "tpot", "itl", "e2el")


def _num(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def replica_metrics(sampled, load_seconds=None):
    """Server-side view of one replica during a step: queue, KV cache, tokens/s (from /metrics deltas).

    Tokens/s is over the load's own window (``load_seconds``, the bench's duration) where known: the scrape window
    also holds the client's start-up and ready check, which put 2,057 tok/s beside a load of 10,368 on the H200.
    """
    first, last, peak = sampled.get("first") or {}, sampled.get("last") or {}, sampled.get("max") or {}
    elapsed = (last.get("time", 0.0) - first.get("time", 0.0)) if first and last else 0.0
    if load_seconds and 0 < load_seconds <= elapsed:
        elapsed = load_seconds

    def delta(name):
        if name not in first or name not in last:
            return None
        return last[name] - first[name]

    generated, queued, queue_sum = delta("vllm:generation_tokens_total"), delta(
        "vllm:request_queue_time_seconds_count"), delta("vllm:request_queue_time_seconds_sum")
    return {
        "samples": sampled.get("samples", 0),
        "scrape_errors": sampled.get("errors", 0),
        "waiting_max": peak.get("vllm:num_requests_waiting"),
        "running_max": peak.get("vllm:num_requests_running"),
        "kv_cache_usage_max": peak.get("vllm:kv_cache_usage_perc"),
        "queue_time_mean_s": round(queue_sum / queued, 4) if queued else None,
        "generated_tokens": generated,
        "output_tokens_per_s": round(generated / elapsed, 2) if generated is not None and elapsed > 0 else None,
    }


def step_summary(entry):
    """One loadgen step as the report shows it."""
    bench = entry.get("bench") or {}
    completed, failed = int(bench.get("completed") or 0), int(bench.get("failed") or 0)
    total = completed + failed
    summary = {
        "name": entry.get("name"),
        "concurrency": entry.get("concurrency"),
        "request_rate": entry.get("request_rate"),
        "input_len": entry.get("input_len"),
        "output_len": entry.get("output_len"),
        "num_prompts": entry.get("num_prompts"),
        "ran": entry.get("returncode") == 0 and bool(bench),
        "returncode": entry.get("returncode"),
        "completed": completed,
        "failed": failed,
        "error_rate": round(failed / total, 4) if total else (1.0 if entry.get("returncode") else 0.0),
        "duration_s": _num(bench.get("duration")),
        "output_tokens_per_s": _num(bench.get("output_throughput")),
        "requests_per_s": _num(bench.get("request_throughput")),
        "error_samples": bench.get("error_samples", []),
        "broke": entry.get("broke", ""),
        "output_tail": entry.get("output_tail", ""),
        "replicas": {name: replica_metrics(sampled, _num(bench.get("duration")))
                     for name, sampled in sorted((entry.get("metrics") or {}).items())},
    }
    for metric in _LATENCIES:
        summary[metric + "_ms"] = {
            "mean": _num(bench.get("mean_%s_ms" % metric)),
            "p50": _num(bench.get("median_%s_ms" % metric, bench.get("p50_%s_ms" % metric))),
            "p95": _num(bench.get("p95_%s_ms" % metric)),
            "p99": _num(bench.get("p99_%s_ms" % metric)),
        }
    summary["client_queue_ms"] = {"mean": _num(bench.get("mean_client_queue_time_ms")), "p95": _num(bench.get("p95_client_queue_time_ms"))}
    return summary


def load_summary(loadgen):
    """A loadgen summary (one target, one or more steps)."""
    if not loadgen:
        return None
    return {"target": loadgen.get("target"), "base_url": loadgen.get("base_url"),
            "steps": [step_summary(entry) for entry in loadgen.get("steps", [])]}


def within_limits(step, limits):
    """Reasons a step breaks the latency limits (empty when it passes)."""
    reasons = []
    if not step["ran"]:
        return ["the load did not run (exit %s)" % step["returncode"]]
    for metric, limit in (("ttft", limits.get("p95_ttft_ms")), ("itl", limits.get("p95_itl_ms"))):
        value = step[metric + "_ms"]["p95"]
        if limit is not None and value is not None and value > float(limit):
            reasons.append("p95 %s %.1f ms > %s ms" % (metric.upper(), value, limit))
    return reasons


def sweep_analysis(summary, limits, replica_count):
    """The ladder with a verdict per step, and the knee: the last concurrency before the first broken step."""
    ladder, knee, broken = [], None, None
    for step in (summary or {}).get("steps", []):
        reasons = within_limits(step, limits)
        ladder.append(dict(step, passed=not reasons, reasons=reasons))
        if reasons and broken is None:
            broken = step
        elif not reasons and broken is None:
            knee = step
    return {
        "ladder": ladder,
        "knee_concurrency": knee["concurrency"] if knee else None,
        "knee_output_tokens_per_s": knee["output_tokens_per_s"] if knee else None,
        "knee_output_tokens_per_s_per_replica": (
            round(knee["output_tokens_per_s"] / replica_count, 2) if knee and knee["output_tokens_per_s"] and replica_count else None),
        "limit_reached": broken is not None,
        "broken_at": broken["concurrency"] if broken else None,
        "broken_because": within_limits(broken, limits) if broken else [],
    }


def memory_headroom(gpu_memory):
    """Lowest free share of any GPU's memory, in percent; None where no host has GPUs."""
    shares = []
    for gpus in (gpu_memory or {}).values():
        for gpu in gpus or []:
            total, used = gpu.get("memory_total_mib"), gpu.get("memory_used_mib")
            if total:
                shares.append(100.0 * (total - (used or 0)) / total)
    return round(min(shares), 1) if shares else None


def _gate(name, stage, passed, value, limit, detail=""):
    return {"name": name, "stage": stage, "passed": passed, "value": value, "limit": limit, "detail": detail}


def _max_or_none(value, limit):
    return None if value is None else value <= limit


def _load_gates(stage, summary, slo, latency=True):
    gates = []
    for step in (summary or {}).get("steps", []):
        gates.append(_gate("%s error rate" % stage, stage, step["ran"] and step["error_rate"] <= slo["max_error_rate"],
                           step["error_rate"], slo["max_error_rate"], "%d failed of %d" % (step["failed"], step["failed"] + step["completed"])))
        if latency:
            gates.append(_gate("%s p95 TTFT ms" % stage, stage, _max_or_none(step["ttft_ms"]["p95"], slo["p95_ttft_ms"]),
                               step["ttft_ms"]["p95"], slo["p95_ttft_ms"]))
        gates.append(_gate("%s p95 ITL ms" % stage, stage, _max_or_none(step["itl_ms"]["p95"], slo["p95_itl_ms"]),
                           step["itl_ms"]["p95"], slo["p95_itl_ms"]))
    return gates


def _failure_gates(faults, replica_names, max_drop_s=None):
    gates = []
    for fault in faults or []:
        label = "%s %s" % (fault["kind"], fault["replica"])
        drop_s = fault.get("drop_s")
        gates.append(_gate("%s: load balancer dropped it" % label, "failure",
                           bool(fault.get("dropped")) and (max_drop_s is None or (drop_s is not None and drop_s <= max_drop_s)),
                           drop_s, max_drop_s, "seconds from the fault to HAProxy marking it DOWN"))
        gates.append(_gate("%s: back in rotation" % label, "failure", bool(fault.get("restored")), fault.get("restore_s"), None,
                           fault.get("recovery", "")))
        others = [name for name in replica_names if name != fault["replica"]]
        if others:
            step = (fault.get("load_summary") or {}).get("steps", [{}])[0] if fault.get("load_summary") else {}
            served = {name: (step.get("replicas", {}).get(name) or {}).get("generated_tokens") for name in others}
            gates.append(_gate("%s: other replicas kept serving" % label, "failure",
                               any((tokens or 0) > 0 for tokens in served.values()), served, None,
                               "tokens the other replicas generated during the fault's load"))
    return gates


def _restart_gates(restart):
    gates = []
    if not restart:
        return gates
    ray = restart.get("ray") or {}
    gates.append(_gate("Ray back with every node", "restart", bool(ray.get("members")), ray.get("seconds"), None))
    for name, ready in sorted((restart.get("vllm") or {}).items()):
        gates.append(_gate("%s ready after restart" % name, "restart", bool(ready.get("ready")), ready.get("seconds"), None,
                           "seconds from unit start to first token"))
    reboot = restart.get("reboot") or {}
    if reboot.get("host"):
        gates.append(_gate("%s rebooted and serving" % reboot["host"], "restart", reboot.get("ready_s") is not None,
                           reboot.get("ready_s"), None, "seconds from reboot to the first token of its replicas"))
        gates.append(_gate("units enabled on %s" % reboot["host"], "restart", bool(reboot.get("units_enabled")), None, None))
        gates.append(_gate("Ray before vLLM on %s" % reboot["host"], "restart", bool(reboot.get("ray_before_vllm")), None, None))
        gates.append(_gate("model cache reused on %s" % reboot["host"], "restart", bool(reboot.get("cache_reused")), None, None,
                           "same inode and mtime of the snapshot before and after"))
    return gates


def installed_versions(topology, package):
    """The versions of ``package`` the topology stage found installed, one per distinct value across hosts."""
    found = {((record or {}).get("versions") or {}).get(package) for record in ((topology or {}).get("hosts") or {}).values()}
    return sorted(version for version in found if version)


def with_running_versions(cluster, topology):
    """The cluster block with the vLLM and Ray versions the hosts run (the pins when no host was read): the H200 report
    printed an empty vLLM version where the inventory named no pin."""
    cluster = dict(cluster)
    for package in ("vllm", "ray"):
        running = installed_versions(topology, package)
        pin = cluster.get("%s_version" % package) or ""
        cluster["%s_pin" % package] = pin
        cluster["%s_version" % package] = ", ".join(running) if running else pin
    return cluster


def build_report(stages, slo, cluster, run_id):
    """The report document (schema_version 1, documented in README)."""
    stages = stages or {}
    cluster = with_running_versions(cluster, stages.get("topology"))
    replica_names = [replica["name"] for replica in cluster.get("replicas", [])]
    report = {"schema_version": SCHEMA_VERSION, "run": run_id, "cluster": cluster, "slo": slo, "stages": {}, "baseline": {}}
    out = report["stages"]
    if "topology" in stages:
        out["topology"] = stages["topology"]
    if "cold_load" in stages:
        out["cold_load"] = stages["cold_load"]
    for stage in LOAD_STAGES:
        if stage in stages:
            out[stage] = load_summary(stages[stage].get("cluster"))
            if stages[stage].get("baseline"):
                report["baseline"][stage] = load_summary(stages[stage]["baseline"])
    if "sweep" in stages:
        limits = {"p95_ttft_ms": slo["p95_ttft_ms"], "p95_itl_ms": slo["p95_itl_ms"]}
        out["sweep"] = sweep_analysis(load_summary(stages["sweep"].get("cluster")), limits, len(replica_names))
        out["sweep"]["gpu_memory_headroom_pct"] = memory_headroom(stages["sweep"].get("gpu_memory"))
        out["sweep"]["gpu_memory"] = stages["sweep"].get("gpu_memory", {})
        if stages["sweep"].get("baseline"):
            report["baseline"]["sweep"] = sweep_analysis(load_summary(stages["sweep"]["baseline"]), limits, 1)
    if "failure" in stages:
        faults = []
        for fault in stages["failure"].get("faults", []):
            fault = dict(fault)
            fault["load_summary"] = load_summary(fault.pop("load", None))
            faults.append(fault)
        out["failure"] = {"faults": faults}
    if "restart" in stages:
        out["restart"] = stages["restart"]
    report["gates"] = evaluate_gates(out, slo, replica_names)
    report["stage_verdicts"] = {
        stage: ("not run" if stage not in out else
                "fail" if any(gate["passed"] is False for gate in report["gates"] if gate["stage"] == stage) else "pass")
        for stage in STAGES}
    report["verdict"] = "fail" if any(gate["passed"] is False for gate in report["gates"]) else "pass"
    return report


def evaluate_gates(out, slo, replica_names):
    gates = []
    for name, ready in sorted(((out.get("cold_load") or {}).get("replicas") or {}).items()):
        gates.append(_gate("%s cold load to first token" % name, "cold_load", bool(ready.get("ready")), ready.get("seconds"), None,
                           "seconds from unit start to first token"))
    gates += _load_gates("short_prompt", out.get("short_prompt"), slo)
    # A prompt near the context limit is slow to its first token by nature: gate its errors and ITL only.
    gates += _load_gates("long_prompt", out.get("long_prompt"), slo, latency=False)
    gates += _load_gates("heavy_output", out.get("heavy_output"), slo, latency=False)
    sweep = out.get("sweep")
    if sweep:
        gates.append(_gate("sweep: some concurrency within the latency limits", "sweep", sweep["knee_concurrency"] is not None,
                           sweep["knee_concurrency"], None, "; ".join(sweep["broken_because"])))
        per_replica = sweep["knee_output_tokens_per_s_per_replica"]
        gates.append(_gate("output tok/s per replica at the knee", "sweep",
                           None if per_replica is None else per_replica >= slo["min_output_tokens_per_s_per_replica"],
                           per_replica, slo["min_output_tokens_per_s_per_replica"]))
        headroom = sweep["gpu_memory_headroom_pct"]
        gates.append(_gate("GPU memory headroom %", "sweep",
                           None if headroom is None else headroom >= slo["min_gpu_memory_headroom_pct"],
                           headroom, slo["min_gpu_memory_headroom_pct"], "" if headroom is not None else "no GPUs on these hosts"))
        for step in sweep["ladder"]:
            if step["passed"]:
                gates.append(_gate("sweep c=%s error rate" % step["concurrency"], "sweep", step["error_rate"] <= slo["max_error_rate"],
                                   step["error_rate"], slo["max_error_rate"]))
    gates += _failure_gates((out.get("failure") or {}).get("faults"), replica_names, slo.get("max_drop_s"))
    gates += _restart_gates(out.get("restart"))
    return gates


def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "%.*f" % (digits, value)
    return str(value)


def _step_row(step):
    return [_fmt(step.get("concurrency") or step.get("request_rate")), _fmt(step["ttft_ms"]["p50"]), _fmt(step["ttft_ms"]["p95"]),
            _fmt(step["ttft_ms"]["p99"]), _fmt(step["tpot_ms"]["p50"]), _fmt(step["itl_ms"]["p50"]), _fmt(step["itl_ms"]["p95"]),
            _fmt(step["e2el_ms"]["p95"]), _fmt(step["output_tokens_per_s"]), "%d/%d" % (step["failed"], step["failed"] + step["completed"])]


STEP_HEADER = ["concurrency", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms", "TPOT p50 ms", "ITL p50 ms", "ITL p95 ms",
               "E2EL p95 ms", "out tok/s", "errors"]


def _md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def report_tables(report):
    """(title, header, rows) for every table both renderings show."""
    tables = [("Gates", ["stage", "gate", "value", "limit", "verdict", "detail"],
               [[gate["stage"], gate["name"], _fmt(gate["value"]) if not isinstance(gate["value"], dict) else
                 ", ".join("%s=%s" % item for item in sorted(gate["value"].items())),
                 _fmt(gate["limit"]), {True: "pass", False: "FAIL", None: "n/a"}[gate["passed"]], gate["detail"]]
                for gate in report["gates"]])]
    stages = report["stages"]
    for stage in LOAD_STAGES:
        rows = []
        for label, summary in (("cluster", stages.get(stage)), ("baseline", report["baseline"].get(stage))):
            for step in (summary or {}).get("steps", []):
                rows.append([label, "%s/%s" % (step["input_len"], step["output_len"])] + _step_row(step))
        if rows:
            tables.append((stage.replace("_", " "), ["target", "in/out tokens"] + STEP_HEADER, rows))
    for label, sweep in (("sweep (cluster)", stages.get("sweep")), ("sweep (baseline)", report["baseline"].get("sweep"))):
        if sweep:
            tables.append((label + ", knee at concurrency %s" % _fmt(sweep["knee_concurrency"]), STEP_HEADER + ["verdict"],
                           [_step_row(step) + ["pass" if step["passed"] else "; ".join(step["reasons"])] for step in sweep["ladder"]]))
    sweep = stages.get("sweep")
    if sweep and sweep["ladder"]:
        rows = []
        for step in sweep["ladder"]:
            for name, server in sorted(step["replicas"].items()):
                rows.append([_fmt(step["concurrency"]), name, _fmt(server["output_tokens_per_s"]), _fmt(server["waiting_max"]),
                             _fmt(server["queue_time_mean_s"], 3), _fmt(server["kv_cache_usage_max"], 3)])
        tables.append(("per replica during the sweep (from /metrics)",
                       ["concurrency", "replica", "out tok/s", "waiting max", "queue time mean s", "KV cache usage max"], rows))
    cold = (stages.get("cold_load") or {}).get("replicas")
    if cold:
        tables.append(("cold load", ["replica", "seconds to first token", "ready"],
                       [[name, _fmt(ready.get("seconds")), _fmt(bool(ready.get("ready")))] for name, ready in sorted(cold.items())]))
    failure = stages.get("failure")
    if failure:
        rows = []
        for fault in failure["faults"]:
            step = ((fault.get("load_summary") or {}).get("steps") or [{}])[0]
            rows.append([fault["kind"], fault["replica"], fault["host"], (fault.get("fault") or {}).get("process", ""),
                         _fmt(fault.get("drop_s"), 2), _fmt(fault.get("restore_s")),
                         "%s/%s" % (step.get("failed", "-"), step.get("failed", 0) + step.get("completed", 0) if step else "-"),
                         fault.get("recovery", "")])
        tables.append(("failure under load", ["fault", "replica", "host", "process", "dropped after s", "back after s",
                                              "client errors", "recovery"], rows))
    restart = stages.get("restart")
    if restart:
        rows = [["Ray (head, then workers)", _fmt((restart.get("ray") or {}).get("seconds"))]]
        rows += [["vLLM %s" % name, _fmt(ready.get("seconds"))] for name, ready in sorted((restart.get("vllm") or {}).items())]
        reboot = restart.get("reboot") or {}
        if reboot.get("host"):
            rows += [["reboot %s: SSH back" % reboot["host"], _fmt(reboot.get("ssh_back_s"))],
                     ["reboot %s: first token" % reboot["host"], _fmt(reboot.get("ready_s"))]]
        tables.append(("restart", ["what", "seconds to ready"], rows))
    return tables


def render_markdown(report, plots):
    cluster = report["cluster"]
    lines = ["# vLLM acceptance report %s: %s" % (report["run"], report["verdict"].upper()), "",
             "Model %s at %s, vLLM %s, Ray %s, endpoint %s." % (
                 cluster.get("model", ""), cluster.get("revision", ""), cluster.get("vllm_version") or "(unknown)",
                 cluster.get("ray_version") or "(unknown)", cluster.get("endpoint", "")), "",
             _md_table(["stage", "verdict"], [[stage, verdict] for stage, verdict in report["stage_verdicts"].items()]), ""]
    for title, header, rows in report_tables(report):
        lines += ["## " + title, "", _md_table(header, rows), ""]
    lines += ["![%s](%s)" % (name, path) for name, path in sorted(plots.items())]
    return "\n".join(lines) + "\n"


def render_html(report, plots):
    def table(header, rows):
        head = "".join("<th>%s</th>" % html.escape(str(cell)) for cell in header)
        body = "".join("<tr>%s</tr>" % "".join(
            '<td class="%s">%s</td>' % ("fail" if cell == "FAIL" else "", html.escape(str(cell))) for cell in row) for row in rows)
        return "<table><tr>%s</tr>%s</table>" % (head, body)

    verdict = report["verdict"]
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>vLLM acceptance %s</title>" % html.escape(report["run"]),
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}.fail{color:#b00;font-weight:bold}"
             ".pass{color:#070}</style></head><body>",
             "<h1>vLLM acceptance %s: <span class='%s'>%s</span></h1>" % (html.escape(report["run"]), verdict, verdict.upper()),
             table(["stage", "verdict"], list(report["stage_verdicts"].items()))]
    for title, header, rows in report_tables(report):
        parts.append("<h2>%s</h2>%s" % (html.escape(title), table(header, rows)))
    for name, path in sorted(plots.items()):
        parts.append("<h2>%s</h2><img src='%s' alt='%s'>" % (html.escape(name), html.escape(path), html.escape(name)))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
