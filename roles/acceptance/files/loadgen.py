# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run `vllm bench serve` step by step and scrape every replica's /metrics while it runs.

The load and its measurements are vLLM's own (`vllm bench serve --save-result`); this script only
orders the steps, stops a concurrency ladder at its first broken step, and samples the server-side
gauges (queue, KV cache) that the client cannot see. Standard library only: it runs on the client
host with the system python.

    loadgen.py SPEC.json     writes <out_dir>/<step>.json per step and <out_dir>/summary.json
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

# Server-side series sampled during each step (summed over label sets).
METRICS = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_queue_time_seconds_count",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
)
GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
# Per-request lists `--save-detailed` adds; summarised here, not carried into the report.
DETAIL_FIELDS = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors",
                 "latencies", "queue_times")


def log(out_dir, text):
    line = "%s %s" % (time.strftime("%H:%M:%S"), text)
    print(line, flush=True)
    with open(os.path.join(out_dir, "progress.log"), "a") as handle:
        handle.write(line + "\n")


def parse_prometheus(text):
    """Sum of each wanted series over its label sets."""
    values = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in METRICS:
            continue
        try:
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
    return values


class Scraper(threading.Thread):
    """Samples every endpoint until stopped; keeps the first and last sample and each gauge's maximum."""

    def __init__(self, endpoints, key, interval):
        super().__init__(daemon=True)
        self.endpoints, self.key, self.interval = endpoints, key, interval
        self.stop_event = threading.Event()
        self.result = {name: {"first": None, "last": None, "max": {}, "samples": 0, "errors": 0} for name in endpoints}

    def sample(self, name, url):
        request = urllib.request.Request(url, headers={"Authorization": "Bearer %s" % self.key} if self.key else {})
        entry = self.result[name]
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                values = parse_prometheus(response.read().decode("utf-8", "replace"))
        except Exception:  # pylint: disable=broad-except  # a replica that is down is data, not a crash
            entry["errors"] += 1
            return
        stamped = dict(values, time=time.time())
        entry["first"] = entry["first"] or stamped
        entry["last"] = stamped
        entry["samples"] += 1
        for gauge in GAUGES:
            if gauge in values:
                entry["max"][gauge] = max(entry["max"].get(gauge, 0.0), values[gauge])

    def run(self):
        while True:
            for name, url in self.endpoints.items():
                self.sample(name, url)
            if self.stop_event.wait(self.interval):
                break
        for name, url in self.endpoints.items():  # one closing sample after the load ended
            self.sample(name, url)


def summarize_errors(errors):
    counts = {}
    for error in errors or []:
        if error:
            first_line = error.strip().splitlines()[-1][:200] if error.strip() else "empty error"
            counts[first_line] = counts.get(first_line, 0) + 1
    return [{"error": text, "count": count} for text, count in sorted(counts.items(), key=lambda kv: -kv[1])[:10]]


def bench_argv(spec, step, result_file, out_dir):
    """vllm bench serve's command line for one step. ``ready_check_timeout_s: 0`` skips its initial single-prompt
    test, which aborts the whole run when a fault hits the replica that test went to (the failure stage's load)."""
    argv = list(spec["bench"]) + [
        "--backend", spec.get("backend", "openai"),
        "--base-url", spec["base_url"],
        "--endpoint", spec.get("endpoint", "/v1/completions"),
        "--model", spec["model"],
        "--tokenizer", spec["tokenizer"],
        "--dataset-name", "random",
        "--random-input-len", str(step["input_len"]),
        "--random-output-len", str(step["output_len"]),
        "--num-prompts", str(step["num_prompts"]),
        "--ignore-eos",
        "--seed", str(spec.get("seed", 0)),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,95,99",
        "--ready-check-timeout-sec", str(spec.get("ready_check_timeout_s", 60)),
        "--disable-tqdm",
        "--save-result", "--save-detailed",
        "--result-dir", out_dir,
        "--result-filename", result_file,
    ]
    if step.get("concurrency"):
        argv += ["--max-concurrency", str(step["concurrency"])]
    if step.get("request_rate"):
        argv += ["--request-rate", str(step["request_rate"])]
    return argv


def run_step(spec, step, key, out_dir):
    name = step["name"]
    result_file = "%s.json" % name
    argv = bench_argv(spec, step, result_file, out_dir)
    env = dict(os.environ, OPENAI_API_KEY=key, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    scraper = Scraper(spec.get("metrics", {}), key, spec.get("scrape_interval_s", 1.0))
    log(out_dir, "step %s: %s prompts, in %s / out %s tokens, concurrency %s, rate %s" % (
        name, step["num_prompts"], step["input_len"], step["output_len"], step.get("concurrency"), step.get("request_rate", "inf")))
    started = time.time()
    scraper.start()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=spec.get("step_timeout_s", 900), check=False)
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, output = 124, "timed out after %ss\n%s" % (exc.timeout, exc.output or "")
    scraper.stop_event.set()
    scraper.join(15)
    finished = time.time()
    bench = {}
    path = os.path.join(out_dir, result_file)
    if returncode == 0 and os.path.exists(path):
        with open(path) as handle:
            bench = json.load(handle)
        bench["error_samples"] = summarize_errors(bench.get("errors"))
        for field in DETAIL_FIELDS:
            bench.pop(field, None)
        with open(path, "w") as handle:
            json.dump(bench, handle, indent=1, sort_keys=True)
    entry = dict(step, returncode=returncode, started=started, finished=finished, bench=bench, metrics=scraper.result,
                 output_tail=output[-3000:] if returncode else "")
    log(out_dir, "step %s: rc=%s in %.1f s, p95 TTFT %s ms, p95 ITL %s ms, %s ok / %s failed, %.1f out tok/s" % (
        name, returncode, finished - started, _fmt(bench.get("p95_ttft_ms")), _fmt(bench.get("p95_itl_ms")),
        bench.get("completed", 0), bench.get("failed", 0), bench.get("output_throughput", 0.0)))
    return entry


def _fmt(value):
    return "%.1f" % value if isinstance(value, (int, float)) else "-"


def breaks(entry, stop_when):
    """The first step over a limit ends a ladder; so does a step that could not run."""
    bench = entry["bench"]
    if entry["returncode"] != 0 or not bench:
        return "bench exited %s" % entry["returncode"]
    for metric, limit in sorted(stop_when.items()):
        if bench.get(metric) is not None and bench[metric] > limit:
            return "%s %.1f > %s" % (metric, bench[metric], limit)
    return ""


def expand_steps(spec):
    """A ladder {concurrency: [..], input_len, output_len, prompts_per_slot, min_prompts} becomes one step per level."""
    ladder = spec.get("ladder")
    if not ladder:
        return spec["steps"]
    return [{"name": "c%d" % level, "concurrency": level, "input_len": ladder["input_len"], "output_len": ladder["output_len"],
             "num_prompts": max(level * ladder.get("prompts_per_slot", 3), ladder.get("min_prompts", 8))}
            for level in ladder["concurrency"]]


def main():
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    out_dir = spec["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    key = ""
    if spec.get("key_file"):
        with open(spec["key_file"]) as handle:
            key = handle.read().strip()
    stop_when = spec.get("stop_when") or {}
    steps = []
    for step in expand_steps(spec):
        entry = run_step(spec, step, key, out_dir)
        steps.append(entry)
        reason = breaks(entry, stop_when) if stop_when else ""
        if reason:
            entry["broke"] = reason
            log(out_dir, "ladder stops at %s: %s" % (step["name"], reason))
            break
    with open(os.path.join(out_dir, "summary.json"), "w") as handle:
        json.dump({"target": spec.get("label", spec["base_url"]), "base_url": spec["base_url"], "steps": steps},
                  handle, indent=1, sort_keys=True)
    log(out_dir, "done: %d step(s)" % len(steps))


if __name__ == "__main__":
    main()
