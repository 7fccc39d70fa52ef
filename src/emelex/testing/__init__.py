"""Test helpers for code built on emelex, public so users can test their own tools.

``ScriptedModel`` replays scripted rounds as a deterministic model. Hypothesis
strategies for every model type live in :mod:`emelex.testing.strategies`, imported
separately because they need the ``hypothesis`` package. :func:`check_tool_contract`
(and its async form) runs your own tool through cancelled turns.
"""

from emelex._facade import fix_module_names
from emelex.testing._contract import (
    ContractReport,
    RunRecord,
    check_tool_contract,
    check_tool_contract_async,
)
from emelex.testing._errors import (
    ContractOptionsError,
    InvalidScript,
    ScriptExhausted,
    ToolAlwaysFails,
    ToolBehaviourError,
    ToolContractError,
    ToolContractViolation,
)
from emelex.testing._scripted import (
    Call,
    Fail,
    Finish,
    Progress,
    Say,
    ScriptedModel,
    Step,
    Think,
    Wait,
)
from emelex.testing._subagent import ScriptedSubAgent
from emelex.testing._tools import (
    REVIEWED,
    ApproveAll,
    ScriptedApprovals,
    ScriptedHook,
    ScriptedTool,
)

__all__ = [
    # your own tools under cancellation
    "ContractOptionsError",
    "ContractReport",
    "RunRecord",
    "ToolAlwaysFails",
    "ToolContractError",
    "ToolContractViolation",
    "check_tool_contract",
    "check_tool_contract_async",
    # tools and approvals
    "ApproveAll",
    "ScriptedApprovals",
    "REVIEWED",
    "ScriptedHook",
    "ScriptedSubAgent",
    "ScriptedTool",
    "ToolBehaviourError",
    # scripted model
    "ScriptedModel",
    "Step",
    "Say",
    "Think",
    "Call",
    "Wait",
    "Fail",
    "Progress",
    "Finish",
    "ScriptExhausted",
    "InvalidScript",
]

fix_module_names(__name__, globals())
