# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait, with sub-second resolution, for a replica or the load balancer to reach a state; print JSON.

    probe.py ready URL MODEL TIMEOUT [KEY_FILE]     until a real one-token completion succeeds
    probe.py lb STATS_URL SERVER STATUS TIMEOUT     until HAProxy reports SERVER with STATUS (UP, DOWN)

Exits 0 with {"reached": true, "at": <epoch>, "waited_s": ...}, or 1 with reached false at the timeout.
Standard library only; the time is this host's clock.
"""

import csv
import io
import json
import sys
import time
import urllib.request


def completion_ok(url, model, key):
    body = json.dumps({"model": model, "prompt": "ready", "max_tokens": 1}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer %s" % key
    request = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200, "200"
    except Exception as exc:  # pylint: disable=broad-except  # not ready yet is the normal case
        return False, str(exc)[:200]


def server_status(stats_url, server):
    try:
        with urllib.request.urlopen(stats_url.rstrip("/") + ";csv", timeout=5) as response:
            text = response.read().decode()
    except Exception as exc:  # pylint: disable=broad-except
        return False, "stats unreachable: %s" % exc
    for row in csv.DictReader(io.StringIO(text.lstrip("# "))):
        if row.get("svname") == server:
            return True, row.get("status", "")
    return False, "no server %s" % server


def wait(check, reached, timeout):
    started, attempts, detail = time.time(), 0, ""
    while True:
        attempts += 1
        ok, detail = check()
        now = time.time()
        if reached(ok, detail) or now - started > timeout:
            return {"reached": reached(ok, detail), "at": now, "waited_s": round(now - started, 2),
                    "attempts": attempts, "detail": detail}
        time.sleep(0.25)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "ready":
        url, model, timeout = sys.argv[2], sys.argv[3], float(sys.argv[4])
        key = ""
        if len(sys.argv) > 5:
            with open(sys.argv[5]) as handle:
                key = handle.read().strip()

        def check():
            return completion_ok(url, model, key)

        def reached(ok, _detail):
            return ok
    elif mode == "lb":
        stats_url, server, wanted, timeout = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])

        def check():
            return server_status(stats_url, server)

        def reached(ok, status):
            # "DOWN" also matches HAProxy's transitional "DOWN 1/2"; "UP" must be steady, not "UP 1/2".
            return ok and (status.startswith(wanted) if wanted == "DOWN" else status == wanted)
    else:
        sys.exit("usage: probe.py ready URL MODEL TIMEOUT [KEY_FILE] | lb STATS_URL SERVER STATUS TIMEOUT")
    result = wait(check, reached, timeout)
    print(json.dumps(result))
    sys.exit(0 if result["reached"] else 1)


if __name__ == "__main__":
    main()
