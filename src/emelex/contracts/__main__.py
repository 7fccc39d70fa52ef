"""``python -m emelex.contracts schema``: print the wire contract's JSON Schema."""

from __future__ import annotations

import json
import sys

from emelex.contracts._schema import json_schema

_USAGE = "usage: python -m emelex.contracts schema > contracts.schema.json\n"


def main(argv: list[str]) -> int:
    """Write the schema document to stdout; exit status 2 on a usage error."""
    if argv != ["schema"]:
        sys.stderr.write(_USAGE)
        return 2
    sys.stdout.write(json.dumps(json_schema(), indent=2, ensure_ascii=False, sort_keys=False))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
