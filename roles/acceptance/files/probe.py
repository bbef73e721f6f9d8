# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait, with sub-second resolution, for the load balancer to report a replica in a state; print JSON.

    probe.py lb STATS_URL SERVER STATUS TIMEOUT     until HAProxy reports SERVER with STATUS (UP, DOWN)

(Whether a replica answers is the vllm_ready module's question, the collection's one readiness definition.)

Exits 0 with {"reached": true, "at": <epoch>, "waited_s": ...}, or 1 with reached false at the timeout.
Standard library only; the time is this host's clock.
"""

import csv
import io
import json
import sys
import time
import urllib.request


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
    if len(sys.argv) != 6 or sys.argv[1] != "lb":
        sys.exit("usage: probe.py lb STATS_URL SERVER STATUS TIMEOUT")
    stats_url, server, wanted, timeout = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])

    def check():
        return server_status(stats_url, server)

    def reached(ok, status):
        # "DOWN" also matches HAProxy's transitional "DOWN 1/2"; "UP" must be steady, not "UP 1/2".
        return ok and (status.startswith(wanted) if wanted == "DOWN" else status == wanted)

    result = wait(check, reached, timeout)
    print(json.dumps(result))
    sys.exit(0 if result["reached"] else 1)


if __name__ == "__main__":
    main()
