"""Harness presets: the foundation a session starts from, beside the agent's own tools.

=================  =============================================================
preset             adds to the agent's instructions, tools and capabilities
=================  =============================================================
``base()``         nothing (the default when no harness is chosen)
``conversation()`` a conversation prompt section and the ``datetime`` tool
``worker()``       a workspace prompt section; the file tools (``read_file``,
                   ``list_directory``, ``find_files``, ``grep``; ``write_file`` and
                   ``edit_file`` only with a writable policy); when the agent has
                   skills, a skills prompt section and the ``load_skill`` tool;
                   task coordination (a tasks prompt section, ``update_tasks`` and
                   ``read_tasks``); budgeting (a budget prompt section, the
                   ``check_budget`` tool, a context budget of
                   ``context_tokens`` estimated tokens applied to every request,
                   default 32,768, which also caps one ``read_file`` or
                   ``grep`` result at a quarter of it in bytes; and a usage
                   budget ``max_total_tokens`` / ``max_model_calls``, default
                   counted but unlimited)
``shell_worker()`` ``worker()`` (with the same budget options) plus the ``shell``
                   tool, its output capped like ``read_file``'s (needs a
                   writable policy)
=================  =============================================================

No preset changes the workspace policy: presets keep the read-only default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from emelex.app._budget import DEFAULT_CONTEXT_TOKENS, ContextBudget, UsageBudget
from emelex.app._errors import InvalidBudget
from emelex.app._policy import WorkspacePolicy
from emelex.app._skill import Skill

CONVERSATION_SECTION = (
    "## Conversation\n"
    "You are talking with a person. Reply directly and concisely in plain language, "
    "keep track of what was said earlier in the conversation, and ask one clarifying "
    "question when a request is ambiguous instead of guessing. Use the datetime tool "
    "when you need the current date or time."
)


def _optional(kind: type[Any]) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not isinstance(value, kind):
            raise InvalidBudget(
                f"Harness.{attribute.name} must be a {kind.__name__} or None, got {value!r}"
            )

    return check


def _context(tokens: int | None) -> ContextBudget | None:
    if tokens is None:
        return None
    if type(tokens) is not int or tokens < 1:
        # Name the preset's own parameter rather than ContextBudget's field.
        raise InvalidBudget(f"context_tokens must be a positive integer or None, got {tokens!r}")
    return ContextBudget(tokens)


@attrs.frozen
class Harness:
    """What a session gets besides the agent's own configuration.

    ``prompt_sections`` join the system prompt after the instructions; ``files``,
    ``skills``, ``shell`` and ``datetime`` add those built-ins (the same ones the
    ``capability(...)`` ids add). ``tasks`` adds the task tools and their prompt section.
    ``context_budget`` fits every model request to a :class:`ContextBudget`;
    ``usage_budget`` counts (and may cap) the session's tokens and model calls and adds
    the ``check_budget`` tool. Use the presets; the fields are public so a preset can be
    inspected (and varied with ``attrs.evolve``). Raises :class:`InvalidBudget` for a
    budget field of the wrong type.
    """

    name: str
    prompt_sections: tuple[str, ...] = ()
    files: bool = False
    skills: bool = False
    shell: bool = False
    datetime: bool = False
    tasks: bool = False
    context_budget: ContextBudget | None = attrs.field(
        default=None, validator=_optional(ContextBudget)
    )
    usage_budget: UsageBudget | None = attrs.field(default=None, validator=_optional(UsageBudget))

    @classmethod
    def base(cls) -> Harness:
        """System essentials only: the agent's instructions, tools and capabilities."""
        return cls("base")

    @classmethod
    def conversation(cls) -> Harness:
        """For dialogue: a conversation prompt section and the ``datetime`` tool."""
        return cls("conversation", prompt_sections=(CONVERSATION_SECTION,), datetime=True)

    @classmethod
    def worker(
        cls,
        *,
        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
        max_total_tokens: int | None = None,
        max_model_calls: int | None = None,
    ) -> Harness:
        """For work on files without a shell: file tools (as the workspace policy
        allows) and a workspace prompt section; skills (section + ``load_skill``) when
        the agent has any; a task list (``update_tasks``, ``read_tasks``); budgeting
        (``check_budget``, every request fitted to ``context_tokens`` estimated tokens,
        ``None`` to send requests unfitted; the session's tokens and model calls capped
        by ``max_total_tokens`` and ``max_model_calls``, ``None`` for no cap). Raises
        :class:`InvalidBudget` for an out-of-range value."""
        return cls(
            "worker",
            files=True,
            skills=True,
            tasks=True,
            context_budget=_context(context_tokens),
            usage_budget=UsageBudget(max_total_tokens, max_model_calls),
        )

    @classmethod
    def shell_worker(
        cls,
        *,
        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
        max_total_tokens: int | None = None,
        max_model_calls: int | None = None,
    ) -> Harness:
        """``worker()`` plus the host ``shell`` (needs ``WorkspacePolicy.read_write()``
        and an approver: every command asks). Same budget options as :meth:`worker`."""
        return cls(
            "shell_worker",
            files=True,
            skills=True,
            shell=True,
            tasks=True,
            context_budget=_context(context_tokens),
            usage_budget=UsageBudget(max_total_tokens, max_model_calls),
        )


def workspace_section(policy: WorkspacePolicy, *, shell: bool) -> str:
    """The prompt section describing the workspace to a model with file tools."""
    lines = [
        "## Workspace",
        "Your files live in the workspace directory /workspace; give paths relative to "
        "it (notes/a.md) or below it (/workspace/notes/a.md).",
    ]
    if policy.write:
        lines.append(
            "You can read, list, search, write and edit files; each write or edit asks "
            "for approval."
        )
    else:
        lines.append(
            "The workspace is read-only: you can read, list and search files but not "
            "create, change or delete them."
        )
    if shell:
        lines.append(
            "A shell runs commands in the workspace root; every command asks for approval."
        )
    return "\n".join(lines)


def skills_section(skills: Sequence[Skill]) -> str:
    """The prompt section listing skills for the ``load_skill`` tool."""
    lines = [
        "## Skills",
        "Skills hold instructions for specific kinds of work. When a task matches a "
        "skill's description, call load_skill with its name and follow what it returns.",
    ]
    lines.extend(f"- {skill.name}: {' '.join(skill.description.split())}" for skill in skills)
    return "\n".join(lines)


__all__ = ["CONVERSATION_SECTION", "Harness", "skills_section", "workspace_section"]
