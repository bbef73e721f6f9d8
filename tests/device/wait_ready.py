"""On the device (no systemd there): wait for the replica's first completion with the collection's one readiness
definition (module_utils/_readiness), where the server process stands in for the unit: the wait ends as soon as it
is gone. Prints the result as JSON; exits 0 only when a completion answered.

    PYTHONPATH=/tmp/collections python3 wait_ready.py URL MODEL TIMEOUT KEY_FILE PID
"""

import json
import sys
import time
import urllib.request

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _readiness


def process_state(pid):
    """The unit properties _readiness reads, from /proc: a dead server no init reaps stays a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    alive = state not in ("Z", "X", "gone")
    return {"ActiveState": "active" if alive else "failed", "SubState": "running" if alive else state, "MainPID": pid}


def main():
    url, model, timeout, key_file, pid = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    with open(key_file) as handle:
        key = handle.read().strip()
    target, body, headers = _readiness.completion_request(url, model, key)

    def probe():
        try:
            with urllib.request.urlopen(urllib.request.Request(target, data=body, headers=headers), timeout=30) as answer:
                return answer.status == 200, "HTTP %d" % answer.status
        except Exception as exc:  # pylint: disable=broad-except  # not answering yet is the normal case
            return False, str(exc)[:200]

    result = _readiness.wait(probe, lambda: process_state(pid), time.monotonic, time.sleep, timeout, 0.25)
    result["at"] = time.time()
    print(json.dumps(result))
    sys.exit(0 if result["ready"] else 1)


if __name__ == "__main__":
    main()
