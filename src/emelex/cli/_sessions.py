"""``emelex sessions list|show|export|delete`` over the SQLite store."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from emelex.cli._run import EXIT_CONFIG, EXIT_OK, default_store_path
from emelex.runtime import open_supervisor
from emelex.store import SessionNotFound, open_sqlite_store


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


async def sessions_command(args: argparse.Namespace) -> int:
    async with (
        open_supervisor("emelex sessions"),
        open_sqlite_store(args.store or default_store_path()) as store,
    ):
        try:
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
                    print(f"{s.id}  {_when(s.updated_at)}  {s.turns:3d} turns  {s.title}")
            elif args.action == "show":
                stored = await store.load_session(args.id)
                print(
                    f"session {stored.id}: {stored.turns} turns, model {stored.config.get('model')}"
                )
                for message in stored.messages:
                    calls = "".join(
                        f" [call {c.name} {json.dumps(c.arguments)}]" for c in message.tool_calls
                    )
                    print(f"{message.role:>9}: {message.text}{calls}")
            elif args.action == "export":
                print(json.dumps(await store.export_session(args.id), indent=2))
            elif args.action == "delete":
                await store.delete_session(args.id)
                print(f"deleted {args.id}", file=sys.stderr)
        except SessionNotFound as exc:
            print(f"emelex: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    return EXIT_OK
