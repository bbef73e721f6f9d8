# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sha256 manifests of a staged model directory: build, render, parse, compare.

The manifest is ``sha256sum`` output (``<hex>  <relative path>``, sorted), so an operator can
check a node by hand with ``cd <model dir> && sha256sum -c <manifest>``. Hashing a 140 GB
snapshot takes minutes per node, so verification keeps a stat cache (size and mtime per file
at the last full hash) and re-hashes only files whose stat changed, as git's index does.
"""

from __future__ import annotations

import hashlib
import os

_CHUNK = 8 * 1024 * 1024


class ManifestError(Exception):
    """A manifest that cannot be read or a tree that cannot be walked."""


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def walk_files(root):
    """Relative paths of every regular file under ``root``, sorted; symlinks are refused (they escape the cache)."""
    if not os.path.isdir(root):
        raise ManifestError("%s is not a directory" % root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                raise ManifestError("%s is a symlink; stage real files so every node reads the same bytes" % full)
            found.append(os.path.relpath(full, root))
    return sorted(found)


def file_stat(path):
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def hash_tree(root, cache=None):
    """Return ``({relpath: sha256}, {relpath: stat}, rehashed_count)``; ``cache`` maps relpath to a previous
    ``{"sha256", "size", "mtime_ns"}`` and lets unchanged files skip hashing."""
    cache = cache or {}
    hashes, stats, rehashed = {}, {}, 0
    for rel in walk_files(root):
        full = os.path.join(root, rel)
        stat = file_stat(full)
        known = cache.get(rel)
        if known and known.get("size") == stat["size"] and known.get("mtime_ns") == stat["mtime_ns"]:
            hashes[rel] = known["sha256"]
        else:
            hashes[rel] = sha256_file(full)
            rehashed += 1
        stats[rel] = stat
    return hashes, stats, rehashed


def render_manifest(hashes):
    return "".join("%s  %s\n" % (hashes[rel], rel) for rel in sorted(hashes))


def parse_manifest(text):
    """Parse ``sha256sum`` output into ``{relpath: sha256}``; raises ManifestError naming the bad line."""
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        digest = digest.lower()
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not rel:
            raise ManifestError("line %d is not '<sha256>  <path>': %r" % (number, line[:120]))
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ManifestError("line %d names a path outside the model directory: %r" % (number, rel))
        entries[rel] = digest
    if not entries:
        raise ManifestError("the manifest lists no files")
    return entries


def compare(expected, actual):
    """Differences between two ``{relpath: sha256}`` maps, each list sorted."""
    return {
        "missing": sorted(set(expected) - set(actual)),
        "extra": sorted(set(actual) - set(expected)),
        "mismatched": sorted(rel for rel in set(expected) & set(actual) if expected[rel] != actual[rel]),
    }


def manifest_digest(text):
    """One hash naming the whole snapshot (for reports and drift checks)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def describe(differences, limit=5):
    parts = []
    for key in ("missing", "mismatched", "extra"):
        items = differences[key]
        if items:
            shown = ", ".join(items[:limit]) + (" and %d more" % (len(items) - limit) if len(items) > limit else "")
            parts.append("%s: %s" % (key, shown))
    return "; ".join(parts)
