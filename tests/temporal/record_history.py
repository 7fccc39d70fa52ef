"""Records tests/temporal/histories/tool_round.json on a fresh dev server:
``python -m tests.temporal.record_history``. Re-record only on purpose: a turn core
change that makes this history fail to replay breaks turns in flight (see
docs/temporal.md, "Changing the turn core")."""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from emelex.temporal import dev_server
from tests.temporal.test_temporal_replay import RECORDED, record_tool_round


def main() -> None:
    with dev_server() as address, tempfile.TemporaryDirectory() as workspace:
        history = trio.run(record_tool_round, address, Path(workspace))
    RECORDED.parent.mkdir(exist_ok=True)
    RECORDED.write_text(history.to_json() + "\n")


if __name__ == "__main__":
    main()
