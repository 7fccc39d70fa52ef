"""LangGraph, hand-built: a 2-node ``StateGraph`` (model node, ``ToolNode``) routed by
``tools_condition``, over the same fake chat model and tool as ``langgraph_turn.py``.

The lighter of the two LangGraph set-ups (no prebuilt agent). Run with the benchmark venv:
``/work/bench-venv/bin/python langgraph_graph_turn.py``.
"""
# mypy: ignore-errors
# (LangGraph is installed only in the benchmark venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
from typing import Any

from _common import parse_args, report, run, time_turns
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph_turn import INPUT, ScriptedChatModel, noop

model = ScriptedChatModel()


async def call_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode([noop]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()


async def turn() -> None:
    state = await graph.ainvoke(INPUT)
    assert state["messages"][-1].content == "done", state


async def main() -> None:
    args = parse_args()
    state = await graph.ainvoke(INPUT)
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"], kinds
    timing = await time_turns(turn, args.turns, args.warmup)
    report("langgraph (2-node graph)", importlib.metadata.version("langgraph"), timing)


if __name__ == "__main__":
    run(main)
