# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drive llmserve.vllm_cluster's playbooks from Python and get structured results back.

    from llmserve_runbook import run
    result = run("deploy", inventory="inventories/prod")
    result.exit_code, result.hosts["node1"]["changed"], result.report

The same commands back the ``llmserve-runbook`` console script.
"""

from llmserve_runbook.commands import COMMANDS, EXIT_CODES
from llmserve_runbook.result import Result
from llmserve_runbook.runner import run

__all__ = ["COMMANDS", "EXIT_CODES", "Result", "run"]
