#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_report
short_description: Judge the acceptance stages against the SLOs and write the report (JSON, Markdown, HTML, PNG)
version_added: 0.1.0
description:
  - Summarises what the acceptance role measured (C(vllm bench serve) results, /metrics samples, cold-load, failure
    and restart records), finds the concurrency knee, evaluates every gate and writes C(report.json),
    C(report.md) and C(report.html) with PNG plots into O(run_dir) on the host it runs on (the controller).
  - Plots need matplotlib (a controller requirement); without it the report is written without plots and says so.
  - The JSON schema is documented in the collection's README (C(schema_version) 1).
author:
  - llmserve maintainers (@llmserve)
options:
  run_dir:
    description: Directory the report files go to; created if missing.
    type: path
    required: true
  run_id:
    description: Name of the run (a UTC timestamp).
    type: str
    required: true
  stages:
    description: What each stage recorded, keyed by stage name.
    type: dict
    required: true
  slo:
    description:
      - Limits C(p95_ttft_ms), C(p95_itl_ms), C(max_error_rate), C(min_output_tokens_per_s_per_replica),
        C(min_gpu_memory_headroom_pct), and optionally C(max_drop_s) (failure stage).
    type: dict
    required: true
  cluster:
    description: What was tested (endpoint, model, revision, versions, replicas).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Evaluates the gates but writes nothing.
  diff_mode:
    support: none
    description: The report is new files in a new directory; there is nothing to compare.
"""

EXAMPLES = r"""
- name: Write the report on the controller
  llmserve.vllm_cluster.acceptance_report:
    run_dir: artifacts/acceptance/20261203T120000Z
    run_id: 20261203T120000Z
    stages: "{{ __acceptance_stages }}"
    slo: {p95_ttft_ms: 2000, p95_itl_ms: 200, max_error_rate: 0.01, min_output_tokens_per_s_per_replica: 10,
          min_gpu_memory_headroom_pct: 5}
  delegate_to: localhost
"""

RETURN = r"""
verdict:
  description: V(pass) when no gate failed, else V(fail).
  returned: always
  type: str
  sample: pass
failed_gates:
  description: The gates that failed, with value and limit.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "short_prompt p95 TTFT ms", "stage": "short_prompt", "passed": false, "value": 2400.1, "limit": 2000}]
stage_verdicts:
  description: V(pass), V(fail) or V(not run) per stage.
  returned: always
  type: dict
  sample: {"topology": "pass", "sweep": "pass", "failure": "not run"}
knee_concurrency:
  description: The last concurrency of the sweep within the p95 TTFT and ITL limits.
  returned: always
  type: int
  sample: 8
files:
  description: Paths of the files written.
  returned: always
  type: dict
  sample: {"json": "artifacts/acceptance/20261203T120000Z/report.json"}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._acceptance import (
    build_report,
    render_html,
    render_markdown,
)

try:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
except ImportError:
    pyplot = None

SLO_KEYS = ("p95_ttft_ms", "p95_itl_ms", "max_error_rate", "min_output_tokens_per_s_per_replica", "min_gpu_memory_headroom_pct")


def _series(sweep, pick):
    points = [(step["concurrency"], pick(step)) for step in sweep["ladder"] if pick(step) is not None]
    return [x for x, _y in points], [y for _x, y in points]


def _save(figure, axis, knee, ylabel, path):
    """Knee line, log-2 concurrency axis, labels and legend; write the PNG."""
    if knee:
        axis.axvline(knee, color="green", linestyle=":", label="knee (c=%s)" % knee)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("concurrency")
    axis.set_ylabel(ylabel)
    axis.legend(fontsize=8)
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def plot_sweep(report, run_dir):
    """TTFT p50/p95 and throughput against concurrency, with the limit line and the knee."""
    sweeps = [(label, sweep) for label, sweep in (("cluster", report["stages"].get("sweep")),
                                                  ("baseline", report["baseline"].get("sweep"))) if sweep and sweep["ladder"]]
    if not sweeps or pyplot is None:
        return {}
    knee = report["stages"].get("sweep", {}).get("knee_concurrency")
    figure, axis = pyplot.subplots(figsize=(7, 4))
    for label, sweep in sweeps:
        for percentile, style in (("p50", "o-"), ("p95", "s--")):
            xs, ys = _series(sweep, lambda step, p=percentile: step["ttft_ms"][p])
            axis.plot(xs, ys, style, label="%s TTFT %s" % (label, percentile))
    axis.axhline(report["slo"]["p95_ttft_ms"], color="red", linestyle=":", label="p95 TTFT limit")
    _save(figure, axis, knee, "TTFT (ms)", os.path.join(run_dir, "ttft_vs_concurrency.png"))

    figure, axis = pyplot.subplots(figsize=(7, 4))
    for label, sweep in sweeps:
        xs, ys = _series(sweep, lambda step: step["output_tokens_per_s"])
        axis.plot(xs, ys, "o-", label="%s output tok/s" % label)
    _save(figure, axis, knee, "output tokens/s", os.path.join(run_dir, "throughput_vs_concurrency.png"))
    return {"TTFT vs concurrency": "ttft_vs_concurrency.png", "throughput vs concurrency": "throughput_vs_concurrency.png"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            run_dir=dict(type="path", required=True),
            run_id=dict(type="str", required=True),
            stages=dict(type="dict", required=True),
            slo=dict(type="dict", required=True),
            cluster=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    slo = module.params["slo"]
    missing = [key for key in SLO_KEYS if key not in slo]
    if missing:
        module.fail_json(msg="slo lacks %s: set the acceptance_slo_* variables" % ", ".join(missing))
    try:
        slo = {key: float(value) for key, value in slo.items() if key in SLO_KEYS + ("max_drop_s",)}
    except (TypeError, ValueError) as exc:
        module.fail_json(msg="every acceptance_slo_* value must be a number: %s" % exc)
    report = build_report(module.params["stages"], slo, module.params["cluster"], module.params["run_id"])
    run_dir = module.params["run_dir"]
    files = {name: os.path.join(run_dir, "report.%s" % name) for name in ("json", "md", "html")}
    result = dict(changed=False, verdict=report["verdict"], stage_verdicts=report["stage_verdicts"],
                  failed_gates=[gate for gate in report["gates"] if gate["passed"] is False],
                  knee_concurrency=(report["stages"].get("sweep") or {}).get("knee_concurrency"), files=files)
    if module.check_mode:
        module.exit_json(**result)
    os.makedirs(run_dir, exist_ok=True)
    plots = plot_sweep(report, run_dir)
    report["plots"] = plots
    if pyplot is None:
        report["plots_missing"] = "matplotlib is not installed on the controller"
    with open(files["json"], "w") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
    with open(files["md"], "w") as handle:
        handle.write(render_markdown(report, plots))
    with open(files["html"], "w") as handle:
        handle.write(render_html(report, plots))
    files.update({name: os.path.join(run_dir, path) for name, path in plots.items()})
    result.update(changed=True, files=files)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
