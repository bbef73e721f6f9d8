"""A second, independent load client (not loadgen.py, not `vllm bench serve`): streaming completions over httpx.

  python3 independent_client.py URL MODEL KEY_FILE CONCURRENCY REQUESTS INPUT_WORDS OUTPUT_TOKENS

Each request streams /v1/completions with a prompt of INPUT_WORDS random words of the device models'
word-level tokenizer (one word, one token) and asks for exactly OUTPUT_TOKENS (ignore_eos). Prints JSON:
TTFT p50/p95 (first streamed text), output tokens per second over the whole run (from the server's usage),
and the error count.
"""

import asyncio
import json
import random
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


async def run(url, model, key, concurrency, requests, input_words, output_tokens, vocab=120000):
    rng = random.Random(7)
    prompts = [" ".join("t%d" % rng.randrange(3, vocab) for _word in range(input_words)) for _prompt in range(requests)]
    queue = asyncio.Queue()
    for prompt in prompts:
        queue.put_nowait(prompt)
    ttfts, tokens, errors = [], [0], [0]
    headers = {"Authorization": "Bearer %s" % key}
    async with httpx.AsyncClient(headers=headers, timeout=600) as client:
        async def worker():
            while not queue.empty():
                prompt = queue.get_nowait()
                try:
                    ttft, count = await _one(client, url, model, prompt, output_tokens)
                    ttfts.append(ttft)
                    tokens[0] += count
                except (httpx.HTTPError, ValueError):
                    errors[0] += 1

        start = time.perf_counter()
        await asyncio.gather(*[worker() for _worker in range(concurrency)])
        elapsed = time.perf_counter() - start
    ms = [t * 1000 for t in ttfts if t is not None]
    return {"client": "independent (httpx streaming)", "concurrency": concurrency, "requests": requests,
            "input_words": input_words, "output_tokens": output_tokens, "errors": errors[0], "elapsed_s": round(elapsed, 2),
            "ttft_ms": {"p50": _percentile(ms, 50), "p95": _percentile(ms, 95), "mean": statistics.mean(ms) if ms else None},
            "output_tokens_per_s": round(tokens[0] / elapsed, 1)}


def main(argv):
    url, model, key_file = argv[0].rstrip("/"), argv[1], argv[2]
    concurrency, requests, input_words, output_tokens = (int(value) for value in argv[3:7])
    with open(key_file) as handle:
        key = handle.read().strip()
    print(json.dumps(asyncio.run(run(url, model, key, concurrency, requests, input_words, output_tokens))))


if __name__ == "__main__":
    main(sys.argv[1:])
