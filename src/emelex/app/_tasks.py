"""Task coordination: a per-session task list the model keeps with the ``update_tasks``
tool and reads back with ``read_tasks``.

The list is not stored anywhere else: it is *derived from committed history*. The last
``update_tasks`` call whose result in history says it succeeded holds the current list
(:func:`tasks_from_history`), so a resumed or forked session (started from the same
messages) has the same list, and replaying history replays it exactly. A failed turn
keeps an update whose call ran, because the harness commits a checkpoint once a tool
may have run. The tools have no host effects and never ask for approval.

``update_tasks`` replaces the whole list. Rules (checked by :class:`TaskList`; a
violation is reported to the model as an error result and changes nothing): at most
:data:`MAX_TASKS` tasks; each task's ``content`` is one line (whitespace runs become one
space), not blank, at most :data:`MAX_TASK_BYTES` UTF-8 bytes; ``status`` is
``pending``, ``in_progress`` or ``completed``; at most one task is ``in_progress``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs
import trio

from emelex.app._errors import InvalidTaskList
from emelex.model import Message, ToolDefinition
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

TaskStatus: TypeAlias = Literal["pending", "in_progress", "completed"]
"""Where a task stands."""

TASK_STATUSES: Final[tuple[TaskStatus, ...]] = get_args(TaskStatus)
#: Most tasks one list may hold.
MAX_TASKS: Final = 50
#: Longest task content, in UTF-8 bytes.
MAX_TASK_BYTES: Final = 500

UPDATE_TASKS: Final = "update_tasks"
READ_TASKS: Final = "read_tasks"
# Every successful update_tasks result starts with this; no error result does. History
# derivation relies on it, so it must not change between versions.
UPDATED_PREFIX: Final = "Task list updated"


def _one_line(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidTaskList(f"content must be a string, got {type(value).__name__}")
    return " ".join(value.split())


def _check_content(_instance: Any, _attribute: Any, value: str) -> None:
    if not value:
        raise InvalidTaskList("content is blank")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_TASK_BYTES:
        raise InvalidTaskList(f"content is {size} bytes, more than the {MAX_TASK_BYTES} allowed")


def _check_status(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in TASK_STATUSES:
        raise InvalidTaskList(f"status {value!r} is not one of {', '.join(TASK_STATUSES)}")


@attrs.frozen
class Task:
    """One task: what to do (``content``, normalized to one line) and its ``status``.
    Raises :class:`InvalidTaskList` when a rule is broken."""

    content: str = attrs.field(converter=_one_line, validator=_check_content)
    status: TaskStatus = attrs.field(default="pending", validator=_check_status)


def _to_tasks(value: Any) -> tuple[Task, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise InvalidTaskList(f"tasks must be a sequence of Task, got {type(value).__name__}")
    tasks = tuple(value)
    for index, task in enumerate(tasks, 1):
        if not isinstance(task, Task):
            raise InvalidTaskList(f"task {index} is not a Task: {task!r}")
    return tasks


def _check_tasks(_instance: Any, _attribute: Any, tasks: tuple[Task, ...]) -> None:
    if len(tasks) > MAX_TASKS:
        raise InvalidTaskList(f"the list has {len(tasks)} tasks, more than the {MAX_TASKS} allowed")
    active = [index for index, task in enumerate(tasks, 1) if task.status == "in_progress"]
    if len(active) > 1:
        numbers = ", ".join(str(index) for index in active)
        raise InvalidTaskList(f"tasks {numbers} are all in_progress; at most one may be")


@attrs.frozen
class TaskList:
    """An ordered, validated list of tasks (empty by default). Iterable; ``len`` works.
    Raises :class:`InvalidTaskList` when a rule is broken."""

    tasks: tuple[Task, ...] = attrs.field(default=(), converter=_to_tasks, validator=_check_tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    @property
    def in_progress(self) -> Task | None:
        """The task being worked on, if any."""
        return next((task for task in self.tasks if task.status == "in_progress"), None)

    def count(self, status: TaskStatus) -> int:
        return sum(1 for task in self.tasks if task.status == status)

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> TaskList:
        """The list an ``update_tasks`` call asks for (``{"tasks": [{"content": ...,
        "status": ...}, ...]}``). Raises :class:`InvalidTaskList` naming the bad task."""
        items = arguments.get("tasks")
        if not isinstance(items, list):
            raise InvalidTaskList("'tasks' must be a list of {content, status} objects")
        if len(items) > MAX_TASKS:
            raise InvalidTaskList(
                f"the list has {len(items)} tasks, more than the {MAX_TASKS} allowed"
            )
        tasks: list[Task] = []
        for index, item in enumerate(items, 1):
            if not isinstance(item, Mapping) or "content" not in item or "status" not in item:
                raise InvalidTaskList(f"task {index} must be an object with content and status")
            try:
                tasks.append(Task(item["content"], item["status"]))
            except InvalidTaskList as exc:
                raise InvalidTaskList(f"task {index}: {exc}") from None
        return cls(tasks)

    def to_arguments(self) -> dict[str, Any]:
        """The ``update_tasks`` arguments that produce this list."""
        return {"tasks": [{"content": t.content, "status": t.status} for t in self.tasks]}

    def summary(self) -> str:
        """E.g. ``"3 tasks: 1 completed, 1 in progress, 1 pending"``."""
        counts = ", ".join(
            f"{self.count(status)} {status.replace('_', ' ')}" for status in TASK_STATUSES[::-1]
        )
        return f"{len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''}: {counts}"

    def render(self) -> str:
        """One numbered line per task: ``1. [in_progress] Draft the plan``."""
        return "\n".join(
            f"{index}. [{task.status}] {task.content}" for index, task in enumerate(self.tasks, 1)
        )


def update_result(tasks: TaskList) -> str:
    """The result text of a successful ``update_tasks`` call."""
    if not tasks:
        return f"{UPDATED_PREFIX}: the list is now empty."
    return f"{UPDATED_PREFIX} ({tasks.summary()}):\n{tasks.render()}"


def read_result(tasks: TaskList) -> str:
    """The result text of ``read_tasks``."""
    if not tasks:
        return "The task list is empty."
    return f"Current task list ({tasks.summary()}):\n{tasks.render()}"


def tasks_from_history(messages: Sequence[Message]) -> TaskList:
    """The task list ``messages`` establish: the arguments of the last ``update_tasks``
    call answered by a successful result (an empty list when there is none). Pure."""
    answered: dict[str, Message] = {}
    # Walk backwards: a batch's results follow its assistant message, so they are seen
    # first; the first successful call found is the last one made.
    for message in reversed(messages):
        if message.role == "tool":
            assert message.tool_call_id is not None
            answered[message.tool_call_id] = message
            continue
        for call in reversed(message.tool_calls):
            result = answered.get(call.id)
            if call.name != UPDATE_TASKS or result is None:
                continue
            if not result.text.startswith(UPDATED_PREFIX):
                continue
            try:
                return TaskList.from_arguments(call.arguments)
            except InvalidTaskList:
                continue
        answered.clear()
    return TaskList()


class TaskBoard:
    """One session's view of its task list for the task tools.

    The committed list is derived from the session's history; an update made earlier
    in the running turn (not committed yet) is remembered by turn id so ``read_tasks``
    sees it. A later turn has another id, so a stale note is never used.
    """

    def __init__(self) -> None:
        self._history: Callable[[], Sequence[Message]] = tuple
        self._latest: tuple[str, TaskList] | None = None

    def bind(self, history: Callable[[], Sequence[Message]]) -> None:
        """Read committed history from ``history`` (set once the session exists)."""
        self._history = history

    def committed(self) -> TaskList:
        return tasks_from_history(self._history())

    def current(self, turn_id: str) -> TaskList:
        if self._latest is not None and self._latest[0] == turn_id:
            return self._latest[1]
        return self.committed()

    def record(self, turn_id: str, tasks: TaskList) -> None:
        self._latest = (turn_id, tasks)


_TASK_ITEM: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "content": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TASK_BYTES,
            "description": "What to do, in one line.",
        },
        "status": {"type": "string", "enum": list(TASK_STATUSES)},
    },
    "required": ["content", "status"],
    "additionalProperties": False,
}


class _TaskTool:
    """Shared protocol plumbing of the two task tools (no approval, no host effects)."""

    def __init__(self, board: TaskBoard, definition: ToolDefinition) -> None:
        self._board = board
        self._definition = definition

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None


class UpdateTasksTool(_TaskTool):
    """``update_tasks``: replace the whole task list."""

    def __init__(self, board: TaskBoard) -> None:
        schema = {
            "type": "object",
            "properties": {
                "tasks": {
                    "type": "array",
                    "maxItems": MAX_TASKS,
                    "items": dict(_TASK_ITEM),
                    "description": "The whole new list, in order.",
                }
            },
            "required": ["tasks"],
            "additionalProperties": False,
        }
        description = (
            "Replace your task list with the given tasks (send the whole list every time). "
            "Each task has content and a status: pending, in_progress or completed; at "
            f"most one task may be in_progress; at most {MAX_TASKS} tasks."
        )
        super().__init__(board, ToolDefinition(UPDATE_TASKS, description, schema))

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        await trio.lowlevel.checkpoint()
        try:
            tasks = TaskList.from_arguments(invocation.arguments)
        except InvalidTaskList as exc:
            return ToolOutput.error(
                f"{UPDATE_TASKS} rejected: {exc}. The list was not changed; send the whole "
                "list again."
            )
        self._board.record(invocation.turn_id, tasks)
        return ToolOutput(update_result(tasks))


class ReadTasksTool(_TaskTool):
    """``read_tasks``: show the current task list."""

    def __init__(self, board: TaskBoard) -> None:
        schema = {"type": "object", "properties": {}, "additionalProperties": False}
        description = "Show your current task list with each task's status. No arguments."
        super().__init__(board, ToolDefinition(READ_TASKS, description, schema))

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        await trio.lowlevel.checkpoint()
        return ToolOutput(read_result(self._board.current(invocation.turn_id)))


TASKS_SECTION: Final = (
    "## Tasks\n"
    "For work with several steps, keep a task list with update_tasks, sending the whole "
    "list each time. Give each task a status: pending, in_progress or completed. Mark a "
    "task in_progress before you start it (only one at a time) and completed as soon as "
    "it is done. Call read_tasks to see the current list."
)


__all__ = [
    "MAX_TASKS",
    "MAX_TASK_BYTES",
    "TASKS_SECTION",
    "TASK_STATUSES",
    "ReadTasksTool",
    "Task",
    "TaskBoard",
    "TaskList",
    "TaskStatus",
    "UpdateTasksTool",
    "tasks_from_history",
]
