"""One table for the three reliability and security suites: bad input refused, faults survived with their
recovery times, exposures found. Runs last among the live tests; reads what the others recorded under
artifacts/ (and the acceptance report's host reboot), prints the table and writes artifacts/reliability/summary.txt."""

import glob
import json
import os

from sim_hosts import REPO

RELIABILITY = os.path.join(REPO, "artifacts", "reliability")


def _load(pattern):
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "artifacts", pattern))):
        with open(path) as handle:
            found.append(json.load(handle))
    return found


def _fault_rows():
    rows = [(f["fault"], f["recovered"] and f.get("failed_after_fault", 0) == 0, f.get("recovery_s"),
             "%d/%d failed, %d in flight at the fault" % (f["failed"], f["requests"], f["in_flight_at_fault"]))
            for f in _load("reliability/faults/*.json")]
    for f in _load("reliability/model-cache-faults.json"):
        rows += [(row["fault"], row["outcome"] in ("recovered", "refused"), row.get("seconds"), row["outcome"])
                 for row in f]
    reports = _load("acceptance/*/report.json")
    reboot = ((reports[-1]["stages"].get("restart") or {}).get("reboot") or {}) if reports else {}
    if reboot.get("host"):
        rows.append(("restart whole host %s (reboot, from the acceptance run)" % reboot["host"],
                     reboot.get("ready_s") is not None, reboot.get("ready_s"), "SSH back %ss" % reboot.get("ssh_back_s")))
    return rows


def test_reliability_and_security_summary():
    cases = _load("reliability/bad-input/*.json")
    faults = _fault_rows()
    exposure = (_load("security/exposure.json") or [{}])[0]
    lines = ["bad input: cases tried %d, refused correctly %d (changed=0 on every host, error names the variable)" % (
        len(cases), sum(c["refused_correctly"] for c in cases))]
    lines.append("%-62s %-9s %-10s %s" % ("fault", "survived", "recovery s", "requests"))
    lines += ["%-62s %-9s %-10s %s" % (name, "yes" if ok else "NO", "-" if seconds is None else seconds, detail)
              for name, ok, seconds, detail in faults]
    survived = [row[1] for row in faults]
    lines.append("faults survived %d of %d" % (sum(survived), len(faults)))
    lines.append("exposures found from outside the cluster network: %s (ports tried %s, reachable %s)" % (
        len(exposure.get("exposures", [])) if exposure else "not measured", exposure.get("ports_tried"),
        exposure.get("reachable")))
    change = (_load("security/rules-change.json") or [{}])[0]
    lines.append("connections from outside while the rules changed twice on %s: %s of %s attempts" % (
        change.get("host"), change.get("connected", "not measured"), change.get("attempts")))
    units = _load("security/systemd-analyze.json")
    if units:
        lines.append("systemd-analyze security (exposure, 0 best .. 10 worst): " + ", ".join(
            "%s %s %.1f" % (row["host"], row["unit"], row["exposure"]) for row in units[0]))
    text = "\n".join(lines)
    os.makedirs(RELIABILITY, exist_ok=True)
    with open(os.path.join(RELIABILITY, "summary.txt"), "w") as handle:
        handle.write(text + "\n")
    print("\n" + text)
    assert len(cases) >= 20 and all(c["refused_correctly"] for c in cases), text
    assert len(faults) >= 6 and all(survived), text
    assert exposure and exposure["exposures"] == [], text
