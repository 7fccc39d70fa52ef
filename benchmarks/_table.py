"""The shared result row of the benchmarks and the table printers of ``python -m benchmarks``.

Every benchmark script reports its measures as :class:`Row` values: each figure already
formatted with its unit (the scripts know how to say what they measured), the anchor it
was measured next to, the ratio in the script's own convention (``time`` or ``speed``),
the goal and whether it was met. A row's ``note`` says what a bare figure cannot (why a
row was skipped, which competitors an anchor was the fastest of, ...).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Met = Literal["yes", "no", "n/a", "skipped", "failed"]
MET_VALUES: frozenset[str] = frozenset({"yes", "no", "n/a", "skipped", "failed"})
#: The placeholder for a figure that does not exist (no anchor, no goal, not measured).
NONE = "—"
COLUMNS = ("measure", "emelex", "anchor", "ratio", "goal", "met")


@dataclass(frozen=True)
class Row:
    """One measure of one benchmark, every field ready to print."""

    measure: str
    emelex: str
    anchor: str = NONE
    ratio: str = NONE
    goal: str = NONE
    met: Met = "n/a"
    note: str = ""

    def __post_init__(self) -> None:
        if self.met not in MET_VALUES:
            raise ValueError(f"met must be one of {sorted(MET_VALUES)}, not {self.met!r}")
        if self.goal == NONE and self.met in ("yes", "no"):
            raise ValueError(f"{self.measure!r}: a row without a goal cannot be met or missed")

    @staticmethod
    def skipped(measure: str, reason: str, goal: str = NONE, emelex: str = NONE) -> Row:
        """A measure that could not run here (a missing tool, model or venv)."""
        return Row(measure, emelex, goal=goal, met="skipped", note=reason)

    @staticmethod
    def failed(measure: str, error: str, goal: str = NONE) -> Row:
        """A measure whose benchmark raised or crashed."""
        return Row(measure, NONE, goal=goal, met="failed", note=error)


def met(ok: bool) -> Met:
    return "yes" if ok else "no"


def number(value: float, digits: int = 1) -> str:
    """``1,234.5``-style, or the placeholder for NaN."""
    return NONE if math.isnan(value) else f"{value:,.{digits}f}"


def ratio(value: float, digits: int = 2, unit: str = "") -> str:
    """``0.83x`` (``unit`` appended after a space: ``0.83x speed``)."""
    if math.isnan(value) or math.isinf(value):
        return NONE
    return f"{value:.{digits}f}x" + (f" {unit}" if unit else "")


# -- tables -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Section:
    """The rows of one benchmark, and how long it ran."""

    name: str
    rows: tuple[Row, ...]
    seconds: float = math.nan
    status: Literal["ok", "skipped", "failed"] = "ok"
    detail: str = ""


@dataclass(frozen=True)
class Table:
    """The whole run: machine description and every benchmark's rows."""

    sections: tuple[Section, ...]
    machine: Mapping[str, Any] = field(default_factory=dict)

    def labelled_rows(self) -> list[tuple[str, Row]]:
        """(``benchmark: measure``, row) for every row, in order."""
        return [
            (f"{section.name}: {row.measure}", row)
            for section in self.sections
            for row in section.rows
        ]


def _notes(table: Table) -> tuple[list[list[str]], list[str]]:
    """Cells of every row (measure first; met carrying ``[n]`` when the row has a note)
    and the numbered notes (identical notes share a number)."""
    cells: list[list[str]] = []
    notes: list[str] = []
    for label, row in table.labelled_rows():
        marker = ""
        if row.note:
            if row.note not in notes:
                notes.append(row.note)
            marker = f" [{notes.index(row.note) + 1}]"
        cells.append([label, row.emelex, row.anchor, row.ratio, row.goal, row.met + marker])
    return cells, notes


def machine_line(machine: Mapping[str, Any]) -> str:
    """``key value, key value`` for the printed header."""
    return ", ".join(f"{key} {value}" for key, value in machine.items())


def format_text(table: Table) -> str:
    """Aligned plain-text columns, then the numbered notes."""
    cells, notes = _notes(table)
    header = list(COLUMNS)
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = []
    if table.machine:
        out += [machine_line(table.machine), ""]
    out += [line(header), line(["-" * w for w in widths])]
    out += [line(values) for values in cells]
    if notes:
        out.append("")
        out += [f"[{number}] {note}" for number, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_markdown(table: Table) -> str:
    """A GitHub table (the one in ``docs/performance.md``), then the numbered notes."""
    cells, notes = _notes(table)
    out = []
    if table.machine:
        out += [f"Machine: {machine_line(table.machine)}.", ""]
    out += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_markdown_cell(c) for c in values) + " |" for values in cells]
    if notes:
        out.append("")
        out += [f"{number}. {_markdown_cell(note)}" for number, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def to_json_dict(table: Table) -> dict[str, Any]:
    return {
        "machine": dict(table.machine),
        "benchmarks": [
            {
                "name": s.name,
                "status": s.status,
                "seconds": None if math.isnan(s.seconds) else round(s.seconds, 3),
                "detail": s.detail,
            }
            for s in table.sections
        ],
        "rows": [
            {"benchmark": section.name, **asdict(row)}
            for section in table.sections
            for row in section.rows
        ],
    }


def format_json(table: Table) -> str:
    return json.dumps(to_json_dict(table), indent=2, ensure_ascii=False) + "\n"


def from_json_dict(loaded: Mapping[str, Any]) -> Table:
    """The table :func:`to_json_dict` described (rows keep their benchmarks' order)."""
    sections = []
    for bench in loaded["benchmarks"]:
        rows = tuple(
            Row(**{key: value for key, value in row.items() if key != "benchmark"})
            for row in loaded["rows"]
            if row["benchmark"] == bench["name"]
        )
        seconds = math.nan if bench["seconds"] is None else float(bench["seconds"])
        sections.append(Section(bench["name"], rows, seconds, bench["status"], bench["detail"]))
    return Table(tuple(sections), dict(loaded["machine"]))


# -- rows across a process boundary (the runner runs each benchmark in a child) -----------
def rows_to_json(rows: Iterable[Row]) -> str:
    return json.dumps([asdict(row) for row in rows], ensure_ascii=False)


def rows_from_json(text: str) -> list[Row]:
    loaded = json.loads(text)
    if not isinstance(loaded, list):
        raise ValueError("expected a JSON list of rows")
    return [Row(**item) for item in loaded]
