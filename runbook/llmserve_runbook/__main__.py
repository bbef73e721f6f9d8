# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""python -m llmserve_runbook: the same as the llmserve-runbook console script."""

import sys

from llmserve_runbook.cli import main

sys.exit(main())
