# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inject one fault into a vLLM unit and print what was done, with the time it was done (JSON).

    fault.py kill UNIT     SIGKILL the deepest vLLM worker of the unit (TP/PP worker, else the engine
                           core, else the main process): the crash a GPU fault or the OOM killer causes
    fault.py stop UNIT     systemctl stop UNIT
"""

import json
import os
import signal
import subprocess
import sys
import time


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def victim(main_pid):
    """Prefer a worker (VLLM::Worker*), then the engine core (VLLM::EngineCor*), then the main process."""
    tree, queue = [], [main_pid]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(children(pid))
    for prefix in ("VLLM::Worker", "VLLM::EngineCor"):
        found = [pid for pid in tree if comm(pid).startswith(prefix)]
        if found:
            return found[0]
    return main_pid


def main():
    action, unit = sys.argv[1], sys.argv[2]
    if action == "kill":
        main_pid = int(subprocess.run(["systemctl", "show", "--property=MainPID", "--value", unit],
                                      capture_output=True, text=True, check=True).stdout.strip() or 0)
        if not main_pid:
            sys.exit("%s has no main process: is it running?" % unit)
        pid = victim(main_pid)
        name = comm(pid)
        at = time.time()
        os.kill(pid, signal.SIGKILL)
        print(json.dumps({"action": "sigkill", "unit": unit, "pid": pid, "process": name, "main_pid": main_pid, "at": at}))
    elif action == "stop":
        at = time.time()
        subprocess.run(["systemctl", "stop", unit], check=True)
        print(json.dumps({"action": "stop", "unit": unit, "at": at, "stopped_after_s": round(time.time() - at, 2)}))
    else:
        sys.exit("usage: fault.py kill|stop UNIT")


if __name__ == "__main__":
    main()
