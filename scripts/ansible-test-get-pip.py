"""Offline stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test fetches get-pip from a host outside the package registries, which this
machine cannot reach; it reads the script from ~/.ansible/test/cache/get_pip_<ver>.py
when present. This stand-in does the same job with what is reachable: pip from the
interpreter's bundled ensurepip, then the requested pip version from the package index.
"""

import subprocess
import sys

# get-pip-only flags; plain pip would reject them.
_GET_PIP_FLAGS = ("--no-setuptools", "--no-wheel")

args = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_FLAGS]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
