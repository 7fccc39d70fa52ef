"""LangGraph: ``create_react_agent`` over a fake chat model that returns one `noop` tool
call, then the text "done".

Run with the benchmark venv: ``/work/bench-venv/bin/python langgraph_turn.py``.
``create_react_agent`` is deprecated in LangGraph 1.x in favour of ``langchain.agents``
(another package); it is still LangGraph's own prebuilt agent loop, so it is used here.
"""
# mypy: ignore-errors
# (LangGraph is installed only in the benchmark venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
import itertools
import warnings
from typing import Any

from _common import parse_args, report, run, time_turns
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

_ids = itertools.count()


class ScriptedChatModel(BaseChatModel):
    """Instant model: a tool call first, a text answer once the tool result is in."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _reply(self, messages: list[Any]) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage(content="done")
        else:
            call = {"name": "noop", "args": {}, "id": f"call_{next(_ids)}", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages: list[Any], stop: Any = None, **kwargs: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(self, messages: list[Any], stop: Any = None, **kwargs: Any) -> ChatResult:
        # Overridden so the default (a thread-pool hop to _generate) is not measured.
        return self._reply(messages)


@tool
async def noop() -> str:
    """Does nothing."""
    return "ok"


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    graph = create_react_agent(ScriptedChatModel(), [noop])

INPUT = {"messages": [("user", "hi")]}


async def turn() -> None:
    state = await graph.ainvoke(INPUT)
    assert state["messages"][-1].content == "done", state


async def main() -> None:
    args = parse_args()
    state = await graph.ainvoke(INPUT)
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"], kinds
    timing = await time_turns(turn, args.turns, args.warmup)
    report("langgraph (create_react_agent)", importlib.metadata.version("langgraph"), timing)


if __name__ == "__main__":
    run(main)
