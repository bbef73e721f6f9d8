"""Download one model snapshot at a pinned commit with huggingface_hub (run by the model_cache role).

usage: hf_snapshot.py REPO_ID REVISION DEST
The token, if any, comes from HF_TOKEN in the environment, never from the command line.
"""

import sys

from huggingface_hub import HfApi, snapshot_download


def main():
    repo_id, revision, dest = sys.argv[1:4]
    resolved = HfApi().model_info(repo_id, revision=revision).sha
    if resolved != revision and len(revision) == 40:
        sys.exit("%s: revision %s resolved to %s; refusing a snapshot of other bytes" % (repo_id, revision, resolved))
    snapshot_download(repo_id=repo_id, revision=resolved, local_dir=dest)
    print(resolved)


if __name__ == "__main__":
    main()
