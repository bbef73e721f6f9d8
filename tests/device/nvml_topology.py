"""Dump NVML's view of GPU topology (common ancestor, P2P status, NVLink state) as JSON."""

import json

import pynvml


def _safe(call, *args):
    try:
        return call(*args)
    except pynvml.NVMLError as exc:
        return "error: %s" % exc


def main():
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        result = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpu_count": count, "pairs": [], "nvlinks": {}}
        for i, a in enumerate(handles):
            links = []
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                state = _safe(pynvml.nvmlDeviceGetNvLinkState, a, link)
                if isinstance(state, str):
                    break
                links.append(state)
            result["nvlinks"][i] = links
            for j in range(i + 1, count):
                b = handles[j]
                result["pairs"].append({
                    "gpus": [i, j],
                    "common_ancestor": _safe(pynvml.nvmlDeviceGetTopologyCommonAncestor, a, b),
                    "p2p_read": _safe(pynvml.nvmlDeviceGetP2PStatus, a, b, pynvml.NVML_P2P_CAPS_INDEX_READ),
                    "p2p_nvlink": _safe(pynvml.nvmlDeviceGetP2PStatus, a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
                })
        print(json.dumps(result, indent=2, default=str))
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
