"""``emelex agents``: list, validate, export and diff agent packages (``actors/``).

Exit codes: 0 success (``diff``: the packages are equivalent); 1 ``diff`` found
differences; 2 usage error; 3 a package is invalid or cannot be read or exported.
No model is needed: packages load with their placeholder model binding.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any, TextIO

from emelex.app import (
    PackageError,
    diff_packages,
    export_agent,
    find_packages,
    load_package,
    validate_package,
)
from emelex.cli._archive import archive_top, is_archive_name, write_tar_gz
from emelex.cli._render import safe

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
DEFAULT_DIRECTORY = "actors"

_ARITY = {"list": (0, 1), "validate": (1, None), "export": (2, 2), "diff": (2, 2)}
_USAGE = {
    "list": "emelex agents list [DIR]",
    "validate": "emelex agents validate PATH [PATH ...]  (a folder of packages: each)",
    "export": "emelex agents export PATH DEST  (DEST: a new directory, or a .tar.gz/.tgz file)",
    "diff": "emelex agents diff A B",
}


def add_agents_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``agents`` subcommand to an ``add_subparsers()`` object."""
    agents = commands.add_parser(
        "agents",
        help="agent packages: list, validate, export, diff",
        usage="\n       ".join(_USAGE.values()),
        description="Agent packages: directories holding agent.toml (see actors/).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agents.add_argument("action", choices=list(_ARITY))
    agents.add_argument(
        "paths",
        nargs="*",
        metavar="PATH|DEST",
        help="list: [DIR]; validate: PATH...; export: PATH DEST; diff: A B",
    )
    agents.add_argument("--json", action="store_true", help="machine-readable output")
    return agents


def _print_json(value: Any, out: TextIO) -> None:
    print(json.dumps(value, indent=2, sort_keys=True), file=out)


def agents_command(args: argparse.Namespace) -> int:
    """Run ``emelex agents ACTION PATHS`` (``args.action``, ``args.paths``,
    ``args.json``); returns the exit code."""
    action: str = args.action
    paths: list[str] = list(getattr(args, "paths", None) or [])
    as_json = bool(getattr(args, "json", False))
    low, high = _ARITY[action]
    if len(paths) < low or (high is not None and len(paths) > high):
        print(f"usage: {_USAGE[action]}", file=sys.stderr)
        return EXIT_USAGE
    if action == "list":
        return _list(paths[0] if paths else DEFAULT_DIRECTORY, as_json)
    if action == "validate":
        return _validate(paths, as_json)
    if action == "export":
        return _export(paths[0], paths[1])
    return _diff(paths[0], paths[1], as_json)


def _list(directory: str, as_json: bool) -> int:
    if not os.path.isdir(directory):
        print(f"emelex agents: {directory!r} is not a directory", file=sys.stderr)
        return EXIT_INVALID
    rows: list[dict[str, Any]] = []
    for path in find_packages(directory):
        problems = validate_package(path)
        row: dict[str, Any] = {"path": str(path), "problems": len(problems)}
        if not problems:
            package = load_package(path)
            agent, info = package.agent, package.info
            row.update(
                name=agent.name,
                version=info.version,
                description=info.description,
                preset=info.preset,
                binding=info.binding,
            )
        rows.append(row)
    if as_json:
        _print_json(rows, sys.stdout)
        return EXIT_OK
    if not rows:
        print(f"no agent packages under {directory}", file=sys.stderr)
    for row in rows:
        if row["problems"]:
            print(safe(f"{row['path']}  INVALID ({row['problems']} problems)"))
        else:
            # Names and descriptions come from agent.toml files: shown, never obeyed.
            print(
                safe(
                    f"{row['name']} {row['version']}  [{row['preset']}, model {row['binding']}]  "
                    f"{row['path']}\n    {row['description']}"
                )
            )
    return EXIT_OK


def _validate(paths: list[str], as_json: bool) -> int:
    report: dict[str, list[dict[str, Any]]] = {}
    expanded: list[str] = []
    for path in paths:
        # A folder of packages (like actors/) stands for every package in it.
        inner = find_packages(path) if not os.path.exists(os.path.join(path, "agent.toml")) else []
        expanded.extend([str(p) for p in inner] or [path])
    for path in expanded:
        report[path] = [
            {"path": p.path, "line": p.line, "code": p.code, "message": p.message}
            for p in validate_package(path)
        ]
    invalid = any(report.values())
    if as_json:
        _print_json(report, sys.stdout)
    else:
        for path, problems in report.items():
            if not problems:
                print(f"{path}: ok")
                continue
            print(f"{path}: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
            for problem in problems:
                where = problem["path"]
                if problem["line"] is not None:
                    where += f":{problem['line']}"
                print(safe(f"  {where}: {problem['message']} [{problem['code']}]"))
    return EXIT_INVALID if invalid else EXIT_OK


def _export(source: str, dest: str) -> int:
    try:
        package = load_package(source)  # with its metadata (version, binding, preset)
        if is_archive_name(dest):
            if os.path.lexists(dest):
                raise PackageError(f"export destination {dest!r} already exists")
            with tempfile.TemporaryDirectory(prefix="emelex-export-") as staging:
                top = archive_top(dest)
                export_agent(package, os.path.join(staging, top))
                write_tar_gz(os.path.join(staging, top), dest, top)
        else:
            export_agent(package, dest)
    except PackageError as exc:
        print(f"emelex agents: {safe(str(exc))}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"emelex agents: cannot export to {dest!r}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(safe(f"exported {package.agent.name} to {dest}"), file=sys.stderr)
    return EXIT_OK


def _diff(a: str, b: str, as_json: bool) -> int:
    for path in (a, b):
        if not os.path.isdir(path):
            print(f"emelex agents: {path!r} is not a directory", file=sys.stderr)
            return EXIT_INVALID
    try:
        changes = diff_packages(a, b)
    except PackageError as exc:
        print(f"emelex agents: {safe(str(exc))}", file=sys.stderr)
        return EXIT_INVALID
    if as_json:
        _print_json(
            [
                {"kind": c.kind, "path": c.path, "before": c.before, "after": c.after}
                for c in changes
            ],
            sys.stdout,
        )
    else:
        for change in changes:
            print(safe(str(change)))
    return EXIT_DIFFERENT if changes else EXIT_OK


__all__ = ["add_agents_parser", "agents_command"]
