"""The teardown test reaches the rig with the live tests' helpers (tests/live/sim_hosts.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "live"))
