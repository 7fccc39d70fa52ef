"""``emelex sessions list|show|export|delete`` over the SQLite store."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from emelex._text import clip
from emelex.cli._render import safe
from emelex.cli._run import EXIT_CONFIG, EXIT_OK
from emelex.cli._store import open_cli_store
from emelex.runtime import open_supervisor
from emelex.store import SessionNotFound, SqliteStore

TITLE_WIDTH = 60


def _when(timestamp: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return f"{timestamp!r}"  # a stored time no calendar holds: shown, not fatal


async def sessions_command(args: argparse.Namespace) -> int:
    async with (
        open_supervisor("emelex sessions"),
        open_cli_store(args.store, create=False) as store,
    ):
        try:
            if store is None:  # the default store was never created: nothing stored
                if args.action != "list":
                    raise SessionNotFound(f"no stored session {args.id}")
                if not args.json:
                    print("no stored sessions", file=sys.stderr)
                return EXIT_OK
            return await _action(store, args)
        except SessionNotFound as exc:
            print(f"emelex: {safe(str(exc))}", file=sys.stderr)
            return EXIT_CONFIG


async def _action(store: SqliteStore, args: argparse.Namespace) -> int:
    if args.action == "list":
        summaries = await store.list_sessions()
        if args.json:
            for s in summaries:
                print(
                    json.dumps(
                        {
                            "id": s.id,
                            "updated_at": s.updated_at,
                            "turns": s.turns,
                            "messages": s.messages,
                            "title": s.title,
                        }
                    )
                )
            return EXIT_OK
        if not summaries:
            print("no stored sessions", file=sys.stderr)
        for s in summaries:
            title = safe(clip(s.title, TITLE_WIDTH))
            print(f"{safe(s.id)}  {_when(s.updated_at)}  {s.turns:3d} turns  {title}")
    elif args.action == "show":
        stored = await store.load_session(args.id)
        model = safe(str(stored.config.get("model")))
        print(f"session {safe(stored.id)}: {stored.turns} turns, model {model}")
        for message in stored.messages:
            calls = "".join(
                f" [call {c.name} {json.dumps(c.arguments, ensure_ascii=False)}]"
                for c in message.tool_calls
            )
            print(safe(f"{message.role:>9}: {message.text}{calls}"))
    elif args.action == "export":
        print(json.dumps(await store.export_session(args.id), indent=2))
    elif args.action == "delete":
        await store.delete_session(args.id)
        print(f"deleted {safe(args.id)}", file=sys.stderr)
    return EXIT_OK
