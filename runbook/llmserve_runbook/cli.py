# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmserve-runbook COMMAND -i INVENTORY [-e VARS]... : progress on stderr, the result as JSON on stdout."""

import argparse
import json
import sys

import yaml

from llmserve_runbook import commands, runner


def parse_extra_vars(values):
    """-e k=v (value read as YAML), -e @file.yml, or -e '{json or yaml mapping}', merged left to right."""
    merged = {}
    for value in values or []:
        if value.startswith("@"):
            try:
                with open(value[1:]) as handle:
                    loaded = yaml.safe_load(handle)
            except OSError as exc:
                raise runner.UsageError("-e %s: %s" % (value, exc.strerror)) from exc
        elif value.lstrip().startswith("{"):
            loaded = yaml.safe_load(value)
        elif "=" in value:
            key, raw = value.split("=", 1)
            loaded = {key: yaml.safe_load(raw) if raw else ""}
        else:
            raise runner.UsageError("-e %r: use key=value, @file.yml or a mapping" % value)
        if not isinstance(loaded, dict):
            raise runner.UsageError("-e %r: extra vars must be a mapping" % value)
        merged.update(loaded)
    return merged


class Progress:
    """One line per play, per failure and per change; --verbose streams Ansible's own output."""

    def __init__(self, stream, verbose):
        self.stream, self.verbose = stream, verbose

    def __call__(self, event):
        data = event.get("event_data") or {}
        kind = event.get("event")
        if self.verbose:
            if event.get("stdout"):
                print(event["stdout"], file=self.stream, flush=True)
            return
        if kind == "playbook_on_play_start":
            print("== %s" % data.get("play", ""), file=self.stream, flush=True)
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            res = data.get("res") or {}
            print("!! %s: %s: %s" % (data.get("host"), data.get("task"), str(res.get("msg", ""))[:300]), file=self.stream, flush=True)
        elif kind == "runner_on_ok" and (data.get("res") or {}).get("changed"):
            print("   changed %s: %s" % (data.get("host"), data.get("task")), file=self.stream, flush=True)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="llmserve-runbook", description="Run llmserve.vllm_cluster's playbooks and return a structured result.",
        epilog="exit codes: " + "; ".join("%d %s" % item for item in sorted(commands.EXIT_CODES.items())),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(commands.COMMANDS), help="what to run")
    parser.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="key=value, @file.yml or a mapping; repeatable")
    parser.add_argument("-l", "--limit", help="host pattern, as ansible-playbook --limit")
    parser.add_argument("-t", "--tags", help="comma-separated tags (acceptance stages)")
    parser.add_argument("--artifacts-dir", default="artifacts", help="where reports and runner artifacts go")
    parser.add_argument("--project-dir", default=runner.DEFAULT_PROJECT, help="the collection checkout")
    parser.add_argument("--timeout", type=int, help="seconds before the run is stopped (exit code 6)")
    parser.add_argument("-v", "--verbose", action="store_true", help="stream Ansible's own output")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        outcome = runner.run(
            args.command, args.inventory, extravars=parse_extra_vars(args.extra_vars), project_dir=args.project_dir,
            artifacts_dir=args.artifacts_dir, limit=args.limit, tags=args.tags.split(",") if args.tags else None,
            timeout=args.timeout, on_event=Progress(sys.stderr, args.verbose))
    except runner.UsageError as exc:
        print("llmserve-runbook: %s" % exc, file=sys.stderr)
        json.dump({"command": args.command, "status": "usage", "exit_code": commands.EXIT_USAGE,
                   "exit_meaning": commands.EXIT_CODES[commands.EXIT_USAGE], "error": str(exc)}, sys.stdout, indent=1)
        print()
        return commands.EXIT_USAGE
    json.dump(outcome.as_dict(), sys.stdout, indent=1, sort_keys=True, default=str)
    print()
    print("%s: %s (exit %d: %s) in %.0f s" % (
        outcome.command, outcome.status, outcome.exit_code, outcome.exit_meaning, outcome.seconds), file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
