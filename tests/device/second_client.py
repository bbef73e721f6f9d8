"""Hold the independent client's figures against the acceptance report's sweep at the same concurrency.

  python3 second_client.py REPORT_JSON INDEPENDENT_JSON...

Prints JSON: per level, both clients' output tok/s and TTFT p50, their ratios, whether they agree within 10 %, and
whether the independent client was CPU-bound (then its figures are its own limit, and the level proves nothing).
A level counts only when both clients sent the same load (requests, input and output length): at a fixed
concurrency, the number of requests sets how many waves arrive at once, and TTFT p50 moves with it.
"""

import json
import sys

TOLERANCE = 0.10


def compare(report, independents):
    ladder = {step["concurrency"]: step for step in report["stages"]["sweep"]["ladder"]}
    levels = []
    for other in independents:
        step = ladder.get(other["concurrency"])
        if not step:
            continue
        tok = other["output_tokens_per_s"] / step["output_tokens_per_s"] if step.get("output_tokens_per_s") else None
        ttft = other["ttft_ms"]["p50"] / step["ttft_ms"]["p50"] if step["ttft_ms"].get("p50") else None
        same_load = (other.get("requests"), other.get("input_words"), other.get("output_tokens")) == (
            step.get("num_prompts"), step.get("input_len"), step.get("output_len"))
        levels.append({"concurrency": other["concurrency"], "same_load": same_load,
                       "report": {"output_tokens_per_s": step["output_tokens_per_s"], "ttft_p50_ms": step["ttft_ms"]["p50"]},
                       "independent": {"output_tokens_per_s": other["output_tokens_per_s"],
                                       "ttft_p50_ms": other["ttft_ms"]["p50"], "client_cpu_busy": other.get("client_cpu_busy"),
                                       "errors": other.get("errors")},
                       "tok_s_ratio": round(tok, 3) if tok else None, "ttft_p50_ratio": round(ttft, 3) if ttft else None,
                       "agree": bool(tok and ttft and abs(tok - 1) <= TOLERANCE and abs(ttft - 1) <= TOLERANCE),
                       "client_saturated": bool(other.get("client_saturated"))})
    valid = [level for level in levels if level["same_load"] and not level["client_saturated"]]
    return {"levels": levels, "agree_at": [level["concurrency"] for level in valid if level["agree"]],
            "goal": "within %d %% on tok/s and TTFT p50 at two levels or more" % (TOLERANCE * 100),
            "met": sum(1 for level in valid if level["agree"]) >= 2}


def main(argv):
    with open(argv[0]) as handle:
        report = json.load(handle)
    independents = []
    for path in argv[1:]:
        with open(path) as handle:
            independents.append(json.load(handle))
    print(json.dumps(compare(report, independents), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
