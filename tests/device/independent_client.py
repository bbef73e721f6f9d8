"""A second, independent load client (not loadgen.py, not `vllm bench serve`): streaming completions over httpx.

  python3 independent_client.py URL MODEL KEY_FILE CONCURRENCY REQUESTS INPUT_WORDS OUTPUT_TOKENS [PROCESSES]

Each request streams /v1/completions with a prompt of INPUT_WORDS random words of the device models'
word-level tokenizer (one word, one token) and asks for exactly OUTPUT_TOKENS (ignore_eos). Prints JSON:
TTFT p50/p95 (first streamed text), output tokens per second over the whole run (from the server's usage),
and the error count.

The streams are spread over PROCESSES processes (default: one per 32 streams): one Python process streaming 256
responses measured 4,487 tok/s and a TTFT p50 of 2.3 s where the server gave 10,368 tok/s and 541 ms. Each process
reports its CPU seconds over the run; a process busy more than 80 % of the time marks the figures as the client's
limit, not the server's (``client_saturated``).
"""

import asyncio
import json
import multiprocessing
import random
import resource
import statistics
import sys
import time

import httpx


def _percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100.0 * (len(ordered) - 1))))] if ordered else None


async def _one(client, url, model, prompt, output_tokens):
    body = {"model": model, "prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0}
    start = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if ttft is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return ttft, tokens


async def _streams(url, model, key, concurrency, prompts, output_tokens):
    queue = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    ttfts, tokens, errors = [], [0], [0]
    headers = {"Authorization": "Bearer %s" % key}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, timeout=600, limits=limits) as client:
        async def worker():
            while not queue.empty():
                prompt = queue.get_nowait()
                try:
                    ttft, count = await _one(client, url, model, prompt, output_tokens)
                    ttfts.append(ttft)
                    tokens[0] += count
                except (httpx.HTTPError, ValueError):
                    errors[0] += 1

        await asyncio.gather(*[worker() for _worker in range(concurrency)])
    return ttfts, tokens[0], errors[0]


def _process(job):
    """One client process: its share of the streams; returns its figures, wall window and CPU seconds."""
    url, model, key, concurrency, prompts, output_tokens = job
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    start = time.time()
    ttfts, tokens, errors = asyncio.run(_streams(url, model, key, concurrency, prompts, output_tokens))
    end = time.time()
    used = resource.getrusage(resource.RUSAGE_SELF)
    return {"ttft_ms": [t * 1000 for t in ttfts if t is not None], "tokens": tokens, "errors": errors, "start": start,
            "end": end, "cpu_s": used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime}


def run(url, model, key, concurrency, requests, input_words, output_tokens, processes=0, vocab=120000):
    rng = random.Random(7)
    prompts = [" ".join("t%d" % rng.randrange(3, vocab) for _word in range(input_words)) for _prompt in range(requests)]
    processes = max(1, min(concurrency, processes or -(-concurrency // 32)))
    jobs = [(url, model, key, len(range(i, concurrency, processes)), prompts[i::processes], output_tokens)
            for i in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        parts = pool.map(_process, jobs)
    elapsed = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    ms = [t for p in parts for t in p["ttft_ms"]]
    busy = [round(p["cpu_s"] / max(p["end"] - p["start"], 1e-9), 2) for p in parts]
    return {"client": "independent (httpx streaming, %d processes)" % processes, "concurrency": concurrency,
            "requests": requests, "input_words": input_words, "output_tokens": output_tokens,
            "errors": sum(p["errors"] for p in parts), "elapsed_s": round(elapsed, 2),
            "ttft_ms": {"p50": _percentile(ms, 50), "p95": _percentile(ms, 95), "mean": statistics.mean(ms) if ms else None},
            "output_tokens_per_s": round(sum(p["tokens"] for p in parts) / elapsed, 1),
            "client_cpu_busy": busy, "client_saturated": max(busy) > 0.8}


def main(argv):
    url, model, key_file = argv[0].rstrip("/"), argv[1], argv[2]
    concurrency, requests, input_words, output_tokens = (int(value) for value in argv[3:7])
    processes = int(argv[7]) if len(argv) > 7 else 0
    with open(key_file) as handle:
        key = handle.read().strip()
    print(json.dumps(run(url, model, key, concurrency, requests, input_words, output_tokens, processes)))


if __name__ == "__main__":
    main(sys.argv[1:])
