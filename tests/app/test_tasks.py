"""The worker's task list: its rules, its derivation from history, and sessions that keep
it across turns, failures, resume and fork."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.agent import InvalidHistory
from emelex.app import (
    MAX_TASK_BYTES,
    MAX_TASKS,
    TASK_STATUSES,
    AppError,
    Engine,
    FunctionTool,
    Harness,
    InvalidTaskList,
    NameCollision,
    Session,
    Task,
    TaskList,
    tasks_from_history,
)
from emelex.model import Message, ToolCall
from emelex.testing import Call, Fail, Say, ScriptedModel

from .helpers import builder, outputs, run_collecting

PLAN = [
    {"content": "Read the brief", "status": "completed"},
    {"content": "Draft the   plan\n", "status": "in_progress"},
    {"content": "Write the tests", "status": "pending"},
]
PLANNED = TaskList(
    [
        Task("Read the brief", "completed"),
        Task("Draft the plan", "in_progress"),
        Task("Write the tests", "pending"),
    ]
)


def update(tasks: list[dict[str, Any]]) -> Call:
    return Call("update_tasks", {"tasks": tasks})


# -- the rules ---------------------------------------------------------------------------


def test_tasks_are_normalized_and_checked() -> None:
    assert Task("  two\n lines ").content == "two lines"
    assert Task("x").status == "pending"
    assert TASK_STATUSES == ("pending", "in_progress", "completed")
    assert issubclass(InvalidTaskList, AppError)
    with pytest.raises(InvalidTaskList, match="blank"):
        Task(" \n ")
    with pytest.raises(InvalidTaskList, match="must be a string"):
        Task(3)
    with pytest.raises(InvalidTaskList, match="status 'done'"):
        Task("x", "done")  # type: ignore[arg-type]
    assert Task("é" * (MAX_TASK_BYTES // 2)).content  # exactly the limit, in bytes
    with pytest.raises(InvalidTaskList, match=f"more than the {MAX_TASK_BYTES}"):
        Task("é" * (MAX_TASK_BYTES // 2) + "x")
    with pytest.raises(InvalidTaskList, match=f"more than the {MAX_TASKS}"):
        TaskList([Task(f"t{i}") for i in range(MAX_TASKS + 1)])
    with pytest.raises(InvalidTaskList, match="tasks 1, 3 are all in_progress"):
        TaskList([Task("a", "in_progress"), Task("b"), Task("c", "in_progress")])
    with pytest.raises(InvalidTaskList, match="not a Task"):
        TaskList(["a"])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        PLANNED.tasks = ()  # type: ignore[misc]


def test_a_task_list_reads_from_and_to_tool_arguments() -> None:
    assert TaskList.from_arguments({"tasks": PLAN}) == PLANNED
    assert TaskList.from_arguments(PLANNED.to_arguments()) == PLANNED
    assert PLANNED.in_progress == Task("Draft the plan", "in_progress")
    assert len(PLANNED) == 3 and PLANNED.tasks[0].content == "Read the brief"
    assert PLANNED.summary() == "3 tasks: 1 completed, 1 in progress, 1 pending"
    assert PLANNED.render() == (
        "1. [completed] Read the brief\n"
        "2. [in_progress] Draft the plan\n"
        "3. [pending] Write the tests"
    )
    assert TaskList().in_progress is None
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "'tasks' must be a list"),
        ({"tasks": ["x"]}, "task 1 must be an object with content and status"),
        ({"tasks": [{"content": "a", "status": "pending"}, {"content": "b"}]}, "task 2 must"),
        ({"tasks": [{"content": "", "status": "pending"}]}, "task 1: content is blank"),
        ({"tasks": [{"content": "a"}] * (MAX_TASKS + 1)}, "more than the 50 allowed"),
    ]
    for arguments, problem in cases:
        with pytest.raises(InvalidTaskList, match=problem):
            TaskList.from_arguments(arguments)


tasks_strategy = st.lists(
    st.builds(
        Task,
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80).filter(
            lambda text: text.strip()
        ),
        st.sampled_from(["pending", "completed"]),
    ),
    max_size=MAX_TASKS,
).map(TaskList)


@settings(max_examples=100, deadline=None)
@given(tasks_strategy, st.integers(0, 3))
def test_the_last_successful_update_in_history_wins(tasks: TaskList, noise: int) -> None:
    assert TaskList.from_arguments(tasks.to_arguments()) == tasks
    history = [Message.system("rules"), Message.user("plan")]
    calls = [ToolCall(f"early{i}", "update_tasks", PLANNED.to_arguments()) for i in range(noise)]
    history.append(Message.assistant(tool_calls=calls))
    history.extend(Message.tool(call.id, "Task list updated (...)") for call in calls)
    good = ToolCall("good", "update_tasks", tasks.to_arguments())
    # Later calls that did not succeed change nothing: an error result, a call that
    # never ran, and a result whose arguments no longer validate.
    failed = ToolCall("failed", "update_tasks", PLANNED.to_arguments())
    skipped = ToolCall("skipped", "update_tasks", PLANNED.to_arguments())
    broken = ToolCall("broken", "update_tasks", {"tasks": "nope"})
    history += [
        Message.assistant(tool_calls=[good, failed]),
        Message.tool("good", "Task list updated: whatever the text"),
        Message.tool("failed", "update_tasks rejected: tasks 1, 2 are all in_progress"),
        Message.assistant(tool_calls=[skipped, broken]),
        Message.tool("skipped", "not executed: the turn ended before this call ran"),
        Message.tool("broken", "Task list updated"),
        Message.assistant("done"),
    ]
    assert tasks_from_history(history) == tasks
    assert tasks_from_history(history[:3]) == TaskList()


# -- sessions ----------------------------------------------------------------------------


async def worker_session(model: ScriptedModel) -> tuple[Engine, Session]:
    engine = Engine()
    agent = builder(model).build()  # no approver: the task tools never ask
    return engine, await engine.create(agent).harness(Harness.worker()).start()


async def test_the_task_list_survives_turns_and_the_model_sees_it() -> None:
    model = ScriptedModel(
        [
            [update(PLAN)],
            [Say("planned")],
            [Say("still planned")],
            [Call("read_tasks")],
            [update([{"content": "Ship it", "status": "completed"}])],
            [Say("shipped")],
        ]
    )
    engine, session = await worker_session(model)
    async with engine:
        assert session.tasks == TaskList()
        with trio.fail_after(10):
            _, events = await run_collecting(session, "plan the work")
            assert session.tasks == PLANNED
            await session.send_and_wait("anything new?")
            assert session.tasks == PLANNED
            _, later = await run_collecting(session, "show and finish")
    assert session.tasks == TaskList([Task("Ship it", "completed")])
    result = outputs(events)[0]
    assert not result.is_error
    assert result.text == (
        "Task list updated (3 tasks: 1 completed, 1 in progress, 1 pending):\n"
        "1. [completed] Read the brief\n"
        "2. [in_progress] Draft the plan\n"
        "3. [pending] Write the tests"
    )
    # The next model call got the list in the tool result.
    assert model.requests[1].messages[-1].text == result.text
    read, updated = outputs(later)
    assert read.text.startswith("Current task list (3 tasks: 1 completed, 1 in progress")
    assert updated.text == (
        "Task list updated (1 task: 1 completed, 0 in progress, 0 pending):\n1. [completed] Ship it"
    )
    prompt = session.history[0].text
    assert "## Tasks" in prompt and "update_tasks" in prompt


async def test_a_rejected_update_is_a_readable_error_and_changes_nothing() -> None:
    two_active = [
        {"content": "a", "status": "in_progress"},
        {"content": "b", "status": "in_progress"},
    ]
    model = ScriptedModel(
        [
            [update(PLAN)],
            [update(two_active)],
            [update([{"content": "   ", "status": "pending"}])],
            [update([{"content": "x", "status": "done"}])],
            [Say("ok")],
        ]
    )
    engine, session = await worker_session(model)
    async with engine:
        _, events = await run_collecting(session, "plan")
    first, second, third, fourth = outputs(events)
    assert not first.is_error
    assert second.is_error and second.text == (
        "update_tasks rejected: tasks 1, 2 are all in_progress; at most one may be. "
        "The list was not changed; send the whole list again."
    )
    assert third.is_error and "task 1: content is blank" in third.text
    # The schema check runs first and reports in the harness's own words.
    assert fourth.is_error and "done" in fourth.text
    assert session.tasks == PLANNED


async def test_read_tasks_sees_an_update_made_earlier_in_the_same_turn() -> None:
    model = ScriptedModel(
        [
            [update(PLAN), Call("read_tasks")],
            [Say("seen")],
            [Call("read_tasks")],
            [Say("seen again")],
        ]
    )
    engine, session = await worker_session(model)
    async with engine:
        _, first = await run_collecting(session, "plan")
        _, second = await run_collecting(session, "show")
    same_turn = outputs(first)[1].text
    assert same_turn == "Current task list (3 tasks: 1 completed, 1 in progress, 1 pending):\n" + (
        PLANNED.render()
    )
    assert outputs(second)[0].text == same_turn


async def test_an_update_that_ran_survives_a_failed_turn() -> None:
    model = ScriptedModel([[update(PLAN)], [Fail(RuntimeError("backend down"))]])
    engine, session = await worker_session(model)
    async with engine:
        with pytest.raises(Exception, match="backend down") as caught:
            await session.send_and_wait("plan")
    assert getattr(caught.value, "rolled_back", None) is False
    assert session.tasks == PLANNED


async def test_a_resumed_or_forked_session_continues_the_same_list() -> None:
    model = ScriptedModel([[update(PLAN)], [Say("planned")]])
    engine, session = await worker_session(model)
    async with engine:
        await session.send_and_wait("plan")
        history = session.history
        done = [{"content": t["content"], "status": "completed"} for t in PLAN]
        fork_model = ScriptedModel([[Call("read_tasks")], [update(done)], [Say("done")]])
        agent = builder(fork_model).build()
        fork = await engine.create(agent).harness(Harness.worker()).history(history).start()
        assert fork.history == history  # same agent and harness: same system prompt
        assert fork.tasks == PLANNED
        _, events = await run_collecting(fork, "finish")
        assert outputs(events)[0].text.endswith(PLANNED.render())
        assert [t.status for t in fork.tasks] == ["completed"] * 3
        assert session.tasks == PLANNED  # the original is unaffected
        # The resumed conversation reaches the model whole.
        assert fork_model.requests[0].messages[: len(history)] == history
        # History that calls a tool the new session lacks is refused at start.
        bare = builder(ScriptedModel([])).build()
        with pytest.raises(InvalidHistory):
            await engine.create(bare).history(history).start()
        with pytest.raises(TypeError):
            engine.create(bare).history(["not a message"])  # type: ignore[list-item]


async def test_task_tools_collide_with_agent_tools_of_the_same_name() -> None:
    async def handler(args: dict[str, Any]) -> str:
        return "mine"

    mine = FunctionTool("update_tasks", "Mine.", {"type": "object"}, handler)
    agent = builder(ScriptedModel([])).tool(mine).build()
    with pytest.raises(NameCollision, match="update_tasks"):
        await Engine().create(agent).harness(Harness.worker()).start()
    conversation = await Engine().create(agent).harness(Harness.conversation()).inspect()
    assert "read_tasks" not in conversation.tool_names
