"""``emelex demo``: the round plan (pure) and the whole demo on the real Gemma model."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from emelex.cli._demo import (
    DEMO_FILES,
    SAYS_MAX_CHARS,
    content_lines,
    listed_files,
    plan_round,
)
from emelex.cli._models import gemma_path
from emelex.model import (
    GenerationOptions,
    GenerationRequest,
    Message,
    ToolCall,
    ToolChoice,
    ToolDefinition,
)
from tests.cli.test_cli import EMELEX, _read_until

PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = (
    ToolDefinition("list_directory", "List.", PATH),
    ToolDefinition("read_file", "Read.", PATH),
)
PROMPT = "Which files are here? Read todo.txt and tell me what it says."
LISTING = "notes/\nshopping.md (30 bytes)\ntodo.txt (20 bytes)\n"


def conversation(*messages: Message) -> GenerationRequest:
    return GenerationRequest(
        [Message.user(PROMPT), *messages], tools=TOOLS, options=GenerationOptions(max_tokens=9)
    )


def call(name: str, path: str, call_id: str) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(call_id, name, {"path": path})])


def result(call_id: str, text: str) -> Message:
    return Message("tool", text, tool_call_id=call_id)


def test_listed_files_skips_directories_and_notes() -> None:
    assert listed_files(LISTING) == ["shopping.md", "todo.txt"]
    assert listed_files("") == []
    assert listed_files("[3 more entries not shown]\n") == []


def test_first_round_forces_listing_the_root() -> None:
    plan = plan_round(conversation())
    assert plan.stage == "list"
    assert plan.request.tools == TOOLS  # declared unchanged: the prompt prefix stays
    choice = plan.request.options.tool_choice
    assert isinstance(choice, ToolChoice) and choice.name == "list_directory"
    assert choice.arguments is not None
    assert choice.arguments["properties"]["path"]["enum"] == ["."]
    assert plan.request.options.max_tokens == 9  # the caller's options are kept


def test_second_round_reads_a_file_the_prompt_names() -> None:
    plan = plan_round(conversation(call("list_directory", ".", "c1"), result("c1", LISTING)))
    assert plan.stage == "read"
    choice = plan.request.options.tool_choice
    assert isinstance(choice, ToolChoice) and choice.name == "read_file"
    assert choice.arguments is not None
    assert choice.arguments["properties"]["path"]["enum"] == ["todo.txt"]
    assert choice.arguments["additionalProperties"] is False


def test_without_a_named_file_every_listed_file_is_a_choice() -> None:
    request = GenerationRequest(
        [Message.user("what is here?"), call("list_directory", ".", "c1"), result("c1", LISTING)],
        tools=TOOLS,
    )
    choice = plan_round(request).request.options.tool_choice
    assert isinstance(choice, ToolChoice) and choice.arguments is not None
    assert choice.arguments["properties"]["path"]["enum"] == ["shopping.md", "todo.txt"]


def test_last_round_answers_about_the_file_read() -> None:
    plan = plan_round(
        conversation(
            call("list_directory", ".", "c1"),
            result("c1", LISTING),
            call("read_file", "todo.txt", "c2"),
            result("c2", "Call Sam on Friday."),
        )
    )
    assert plan.stage == "answer"
    options = plan.request.options
    assert options.tool_choice == ToolChoice.NONE
    assert options.output_schema is not None
    jsonschema.validate({"file": "todo.txt", "says": "Call Sam on Friday."}, options.output_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"file": "todo.txt", "says": "hi"}, options.output_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"file": "x", "says": "Call Sam on Friday."}, options.output_schema)
    assert plan.request.tools == TOOLS  # tools stay declared; none may be called


def test_an_unreadable_file_leaves_the_answer_text_free() -> None:
    plan = plan_round(
        conversation(
            call("list_directory", ".", "c1"),
            result("c1", LISTING),
            call("read_file", "todo.txt", "c2"),
            result("c2", "[todo.txt: not found]"),
        )
    )
    schema = plan.request.options.output_schema
    assert schema is not None
    jsonschema.validate({"file": "todo.txt", "says": "anything"}, schema)


def test_content_lines_drop_headers_notes_and_repeats() -> None:
    text = "[a.txt: lines 1-4]\none\n\ntwo\none\n" + "x" * 500 + "\n[end of file]"
    lines = content_lines(text)
    assert lines[:2] == ["one", "two"] and len(lines) == 3
    assert len(lines[2]) == SAYS_MAX_CHARS


def test_only_the_latest_user_message_counts() -> None:
    earlier = [
        Message.user("old question"),
        call("list_directory", ".", "c1"),
        result("c1", LISTING),
        Message("assistant", "old answer"),
    ]
    request = GenerationRequest([*earlier, Message.user(PROMPT)], tools=TOOLS)
    assert plan_round(request).stage == "list"


def test_the_demo_runs_a_real_agent_turn_on_gemma(tmp_path: Path) -> None:
    """The README's first command: real Gemma, real tools, an approval, an answer."""
    assert gemma_path().is_file()  # the packaged model (a failure names the package)
    environment = {**os.environ, "EMELEX_HOME": str(tmp_path / "home")}
    completed = subprocess.run(
        [*EMELEX, "demo", "--no-input"],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    transcript = completed.stdout + completed.stderr
    assert completed.returncode == 0, transcript
    err = completed.stderr
    assert "→ tool list_directory" in err, transcript
    assert "→ tool read_file" in err and "todo.txt" in err, transcript
    assert "approved automatically" in err, transcript
    assert "← result" in err and "Call Sam on Friday." in err, transcript
    answer = json.loads(completed.stdout)
    assert answer == {"file": "todo.txt", "says": "Call Sam on Friday."}, transcript
    assert "--model openai:MODEL" in err and "--model llama:PATH" in err
    assert DEMO_FILES["todo.txt"].strip() in err


@pytest.mark.parametrize(("answer", "approved"), [(b"y\n", True), (b"n\n", False)])
def test_on_a_terminal_the_read_asks_and_the_answer_decides(
    tmp_path: Path, answer: bytes, approved: bool
) -> None:
    """The demo's approval, answered on a real pseudo-terminal (a scripted model stands in
    for Gemma: the guided rounds and the approval are the demo's own)."""
    rounds = [
        [{"call": "list_directory", "arguments": {"path": "."}}],
        [{"call": "read_file", "arguments": {"path": "todo.txt"}}],
        [{"say": '{"file": "todo.txt", "says": "Call Sam on Friday."}'}],
    ]
    spec = tmp_path / "rounds.json"
    spec.write_text(json.dumps({"rounds": rounds}))
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*EMELEX, "demo", "--no-tree", "--model", f"scripted:{spec}"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        prompt = _read_until(master, b"[y/N]", deadline)
        assert b'read the file "todo.txt"' in prompt
        os.write(master, answer)
        rest = _read_until(master, b"Next: point emelex", deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    if approved:
        assert b"Call Sam on Friday." in rest.split(b"answer:")[0]  # the tool result
    else:
        assert b"denied" in rest and b"Call Sam on Friday.\r\n    [end of file]" not in rest
