"""Issue 18, an attack that held: approval reuse.

An approval is for one exact call: a model that repeats an approved call (same name,
same arguments, even the same provider call id, in the same round or a later one) must
be asked about again, and a denial of the repeat keeps it from running.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from emelex.agent import AgentSession, ApprovalContext, ApprovalDecision, Approve, Deny
from emelex.testing import Call, Say, ScriptedModel


@attrs.define
class ApproveOnce:
    """Approves the first call it is asked about and denies every later one."""

    asked: list[ApprovalContext] = attrs.field(factory=list)

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        self.asked.append(context)
        return Approve() if len(self.asked) == 1 else Deny("approved once only")


def session_for(model: ScriptedModel, workspace: Path, policy: ApproveOnce) -> AgentSession:
    return (
        AgentSession.builder(model, workspace)
        .include_shell_tool(False)
        .approval_policy(policy)
        .build()
    )


WRITE = {"path": "a.txt", "content": "approved"}


async def test_a_repeated_call_in_a_later_round_is_asked_again(tmp_path: Path) -> None:
    policy = ApproveOnce()
    model = ScriptedModel(
        [
            [Call("write_file", WRITE, id="same")],
            [Call("write_file", {"path": "a.txt", "content": "replayed"}, id="same")],
            [Say("done")],
        ]
    )
    with trio.fail_after(20), session_for(model, tmp_path, policy) as session:
        await session.run("write twice")
    assert len(policy.asked) == 2
    assert (tmp_path / "a.txt").read_text() == "approved"
    results = [m.text for m in session.history if m.role == "tool"]
    assert "approved once only" in results[1]


async def test_identical_calls_in_one_round_are_each_asked(tmp_path: Path) -> None:
    policy = ApproveOnce()
    model = ScriptedModel(
        [
            [
                Call("write_file", WRITE),
                Call("write_file", {"path": "b.txt", "content": "second"}),
            ],
            [Say("done")],
        ]
    )
    with trio.fail_after(20), session_for(model, tmp_path, policy) as session:
        await session.run("write both")
    assert len(policy.asked) == 2
    assert (tmp_path / "a.txt").read_text() == "approved"
    assert not (tmp_path / "b.txt").exists()


async def test_an_approval_does_not_carry_into_the_next_turn(tmp_path: Path) -> None:
    policy = ApproveOnce()
    model = ScriptedModel(
        [
            [Call("write_file", WRITE)],
            [Say("first done")],
            [Call("write_file", {"path": "a.txt", "content": "later"})],
            [Say("second done")],
        ]
    )
    with trio.fail_after(20), session_for(model, tmp_path, policy) as session:
        await session.run("first")
        await session.run("second")
    assert len(policy.asked) == 2
    assert (tmp_path / "a.txt").read_text() == "approved"
