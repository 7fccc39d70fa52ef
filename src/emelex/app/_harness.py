"""Harness presets: the foundation a session starts from, beside the agent's own tools.

=================  =============================================================
preset             adds to the agent's instructions, tools and capabilities
=================  =============================================================
``base()``         nothing (the default when no harness is chosen)
``conversation()`` a conversation prompt section and the ``datetime`` tool
``worker()``       a workspace prompt section; the file tools (``read_file``,
                   ``list_directory``, ``find_files``, ``grep``; ``write_file`` and
                   ``edit_file`` only with a writable policy); when the agent has
                   skills, a skills prompt section and the ``load_skill`` tool
``shell_worker()`` ``worker()`` plus the ``shell`` tool (needs a writable policy)
=================  =============================================================

No preset changes the workspace policy: presets keep the read-only default.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from emelex.app._agent import Skill
from emelex.app._policy import WorkspacePolicy

CONVERSATION_SECTION = (
    "## Conversation\n"
    "You are talking with a person. Reply directly and concisely in plain language, "
    "keep track of what was said earlier in the conversation, and ask one clarifying "
    "question when a request is ambiguous instead of guessing. Use the datetime tool "
    "when you need the current date or time."
)


@attrs.frozen
class Harness:
    """What a session gets besides the agent's own configuration.

    ``prompt_sections`` join the system prompt after the instructions; ``files``,
    ``skills``, ``shell`` and ``datetime`` add those built-ins (the same ones the
    ``capability(...)`` ids add). Use the presets; the fields are public so a
    preset can be inspected.
    """

    name: str
    prompt_sections: tuple[str, ...] = ()
    files: bool = False
    skills: bool = False
    shell: bool = False
    datetime: bool = False

    @classmethod
    def base(cls) -> Harness:
        """System essentials only: the agent's instructions, tools and capabilities."""
        return cls("base")

    @classmethod
    def conversation(cls) -> Harness:
        """For dialogue: a conversation prompt section and the ``datetime`` tool."""
        return cls("conversation", prompt_sections=(CONVERSATION_SECTION,), datetime=True)

    @classmethod
    def worker(cls) -> Harness:
        """For work on files: file tools (as the workspace policy allows), a workspace
        prompt section, and skills (section + ``load_skill``) when the agent has any."""
        return cls("worker", files=True, skills=True)

    @classmethod
    def shell_worker(cls) -> Harness:
        """``worker()`` plus the host ``shell`` (needs ``WorkspacePolicy.read_write()``
        and an approver: every command asks)."""
        return cls("shell_worker", files=True, skills=True, shell=True)


def workspace_section(policy: WorkspacePolicy, *, shell: bool) -> str:
    """The prompt section describing the workspace to a model with file tools."""
    lines = [
        "## Workspace",
        "Your files live in a workspace directory; give paths relative to its root.",
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
