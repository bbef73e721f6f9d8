"""Make the checkout importable as ``ansible_collections.llmserve.vllm_cluster``.

The repo root is the collection root, so tests link it under a temporary
``ansible_collections/llmserve/`` tree instead of requiring a special checkout path.
"""

import os
import sys
import tempfile

_REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _link_collection():
    parts = _REPO_ROOT.split(os.sep)
    if parts[-3:-1] == ["ansible_collections", "llmserve"] and parts[-1] == "vllm_cluster":
        return os.sep.join(parts[:-3])
    base = tempfile.mkdtemp(prefix="llmserve-collections-")
    namespace_dir = os.path.join(base, "ansible_collections", "llmserve")
    os.makedirs(namespace_dir)
    os.symlink(_REPO_ROOT, os.path.join(namespace_dir, "vllm_cluster"))
    return base


_COLLECTIONS_ROOT = _link_collection()
if _COLLECTIONS_ROOT not in sys.path:
    sys.path.insert(0, _COLLECTIONS_ROOT)
