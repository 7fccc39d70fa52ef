"""The Host's workspace operations (issue 14): every measure in one table.

Each part of the issue keeps its measures in a module of its own; this script runs them
together (``python -m benchmarks --only service_workspace``) or by hand:

    .venv/bin/python benchmarks/service_workspace.py [--quick]

- ``service_files``: ``list_files`` against ``os.scandir``, ``read_file`` against a raw
  read + SHA-256 + Base64, the watch's wake-up latency and its idle CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from benchmarks import service_files
    from benchmarks._table import Row
except ModuleNotFoundError:  # run as a script: python benchmarks/service_workspace.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import service_files
    from benchmarks._table import Row


def rows(quick: bool) -> list[Row]:
    return service_files.rows(quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller inputs, one run")
    args = parser.parse_args()
    for row in rows(args.quick):
        print(f"{row.measure}: {row.emelex} | {row.anchor} | {row.ratio} | {row.goal} | {row.met}")


if __name__ == "__main__":
    main()
