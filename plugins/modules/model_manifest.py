#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_manifest
short_description: Write or verify the sha256 manifest of a staged model directory
version_added: 0.1.0
description:
  - V(present) hashes every file under O(path) and writes O(manifest) in C(sha256sum) format when it does not exist
    yet; an existing manifest is verified instead, never rewritten.
  - V(verified) requires O(manifest) and fails, listing missing, extra and mismatched files, unless the
    directory holds exactly the files and bytes it names.
  - With O(stat_cache), files whose size and mtime are unchanged since their last hash are not read again,
    so a re-run over a large snapshot costs a C(stat) per file; O(full=true) hashes everything.
author:
  - llmserve maintainers (@llmserve)
options:
  path:
    description: The model directory.
    type: path
    required: true
  manifest:
    description: The manifest file, outside O(path).
    type: path
    required: true
  state:
    description: Write the manifest when missing (V(present)) or only verify (V(verified)).
    type: str
    choices: [present, verified]
    default: verified
  stat_cache:
    description: A file on this node that remembers each file's size, mtime and hash from the last verification.
    type: path
  full:
    description: Hash every file even when the stat cache says it is unchanged.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Hashes and compares, but writes neither the manifest nor the stat cache.
  diff_mode:
    support: full
    description: Shows the manifest that would be written.
"""

EXAMPLES = r"""
- name: Write the manifest of a freshly staged snapshot
  llmserve.vllm_cluster.model_manifest:
    path: /srv/vllm-cache/.staging/llama
    manifest: /srv/vllm-cache/manifests/meta-llama--Llama-3.1-8B@0e9e39f249a16976918f6564b8830bc894c89659.sha256
    state: present

- name: Verify the snapshot on every node
  llmserve.vllm_cluster.model_manifest:
    path: /srv/vllm-cache/models/meta-llama--Llama-3.1-8B/0e9e39f249a16976918f6564b8830bc894c89659
    manifest: /srv/vllm-cache/manifests/meta-llama--Llama-3.1-8B@0e9e39f249a16976918f6564b8830bc894c89659.sha256
    stat_cache: /var/lib/vllm-cluster/manifest-cache.json
"""

RETURN = r"""
files:
  description: Number of files in the manifest.
  returned: success
  type: int
  sample: 12
bytes:
  description: Total size of the files.
  returned: success
  type: int
  sample: 16060522496
digest:
  description: sha256 of the manifest text, one name for the whole snapshot.
  returned: success
  type: str
  sample: 5b0c1c8d3e0d4b0f9d0d1b9a8d6a3e1f0b7f6c5d4e3a2b1c0d9e8f7a6b5c4d3e
rehashed:
  description: Files read and hashed in this run (the rest were unchanged according to the stat cache).
  returned: success
  type: int
  sample: 0
differences:
  description: Files C(missing), C(extra) or C(mismatched) against the manifest; all empty on success.
  returned: always
  type: dict
  sample: {"missing": [], "extra": [], "mismatched": []}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.vllm_cluster.plugins.module_utils._manifest import (
    ManifestError,
    compare,
    describe,
    hash_tree,
    manifest_digest,
    parse_manifest,
    render_manifest,
)


def _read_cache(path, key):
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as handle:
            return json.load(handle).get(key, {})
    except (OSError, ValueError):
        return {}  # a damaged cache only costs a re-hash


def _write_cache(module, path, key, hashes, stats):
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = {}
    data[key] = {rel: dict(stats[rel], sha256=hashes[rel]) for rel in hashes}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = "%s.tmp" % path
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    module.atomic_move(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            manifest=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "verified"], default="verified"),
            stat_cache=dict(type="path"),
            full=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    path, manifest, cache_path = module.params["path"], module.params["manifest"], module.params["stat_cache"]
    empty = {"missing": [], "extra": [], "mismatched": []}
    if os.path.realpath(manifest).startswith(os.path.realpath(path) + os.sep):
        module.fail_json(msg="manifest %s lies inside the model directory %s; keep it outside so it does not list itself"
                         % (manifest, path), differences=empty)
    cache_key = os.path.realpath(path)
    cache = {} if module.params["full"] else _read_cache(cache_path, cache_key)
    try:
        hashes, stats, rehashed = hash_tree(path, cache)
    except (ManifestError, OSError) as exc:
        module.fail_json(msg="cannot read model directory %s: %s" % (path, exc), differences=empty)
    result = dict(changed=False, files=len(hashes), bytes=sum(s["size"] for s in stats.values()),
                  rehashed=rehashed, differences=empty)

    if not os.path.exists(manifest):
        if module.params["state"] == "verified":
            module.fail_json(msg="manifest %s does not exist: stage the model first (model_cache role) or fix the path"
                             % manifest, **result)
        text = render_manifest(hashes)
        result.update(changed=True, digest=manifest_digest(text))
        if module._diff:
            result["diff"] = {"before": "", "after": text, "before_header": manifest, "after_header": manifest}
        if not module.check_mode:
            os.makedirs(os.path.dirname(manifest), exist_ok=True)
            tmp = "%s.tmp" % manifest
            with open(tmp, "w") as handle:
                handle.write(text)
            module.atomic_move(tmp, manifest)
            if cache_path:
                _write_cache(module, cache_path, cache_key, hashes, stats)
        module.exit_json(**result)

    try:
        with open(manifest) as handle:
            text = handle.read()
        expected = parse_manifest(text)
    except (OSError, ManifestError) as exc:
        module.fail_json(msg="manifest %s is unreadable: %s" % (manifest, exc), **result)
    differences = compare(expected, hashes)
    result.update(digest=manifest_digest(text), differences=differences, files=len(expected))
    if any(differences.values()):
        module.fail_json(msg="%s does not match its manifest %s: %s" % (path, manifest, describe(differences)), **result)
    if cache_path and rehashed and not module.check_mode:
        _write_cache(module, cache_path, cache_key, hashes, stats)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
