"""``emelex.contracts`` imports neither the engine nor Trio."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A meta-path finder refuses every emelex module except the package root (whose facade
# is lazy), its error, facade-helper and version modules, and the contracts package
# itself; and Trio.
_PROBE = textwrap.dedent(
    """
    import sys

    ALLOWED = ("emelex", "emelex._errors", "emelex._facade", "emelex._version")

    class Block:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top == "trio" or (
                top == "emelex"
                and name not in ALLOWED
                and not (name == "emelex.contracts" or name.startswith("emelex.contracts."))
            ):
                raise ImportError(f"blocked import of {name}")
            return None

    sys.meta_path.insert(0, Block())
    import emelex.contracts as c

    c.from_wire(c.Position, c.to_wire(c.Position(source_sequence=1, item_index=0)))
    c.json_schema()
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("emelex", "trio"))
    print(",".join(loaded))
    """
)


def test_contracts_import_with_the_engine_and_trio_blocked() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.strip().split(",")
    assert "trio" not in loaded
    assert {name for name in loaded if not name.startswith("emelex.contracts")} == {
        "emelex",
        "emelex._errors",
        "emelex._facade",
        "emelex._version",
    }


def test_the_blocker_really_blocks() -> None:
    # The same probe fails when it imports an engine module: the test can fail.
    probe = _PROBE.replace(
        "import emelex.contracts as c", "import emelex.contracts as c\nimport emelex.agent"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "blocked import of emelex.agent" in done.stderr
