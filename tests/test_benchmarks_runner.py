"""``python -m benchmarks``: the table printers on fake rows, the harness's and the
Temporal benchmark's rows without competitors, and the real runner on the cheapest
benchmark."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks import __main__ as runner
from benchmarks._table import (
    NONE,
    Row,
    Section,
    Table,
    format_json,
    format_markdown,
    format_text,
    from_json_dict,
    number,
    ratio,
    rows_from_json,
    rows_to_json,
)

ROOT = Path(__file__).resolve().parent.parent
HEADER = ["measure", "emelex", "anchor", "ratio", "goal", "met"]


def fake_table() -> Table:
    return Table(
        (
            Section(
                "alpha",
                (
                    Row("fast thing", "1.0 µs", "bare 2.0 µs", "2.00x speed", "≥ 0.5x", "yes"),
                    Row("slow | piped thing", "30 ms", "bare 3 ms", "10.0x time", "≤ 2 ms", "no"),
                    Row("memory", "3.1 KiB", goal="≤ 50 KiB", met="yes", note="heap only"),
                ),
                seconds=1.5,
            ),
            Section(
                "beta",
                (Row.skipped("every measure", "needs a model"),),
                status="skipped",
                detail="needs a model",
            ),
            Section("gamma", (Row("other", "5", note="heap only"),)),
        ),
        {"CPUs": 2, "Python": "3.11.7"},
    )


def test_row_checks_its_met_value() -> None:
    with pytest.raises(ValueError, match="met must be one of"):
        Row("m", "1", met="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without a goal"):
        Row("m", "1", met="yes")
    skipped = Row.skipped("m", "rg not installed", goal="≤ 3x", emelex="5")
    assert (skipped.met, skipped.note, skipped.goal, skipped.emelex) == (
        "skipped",
        "rg not installed",
        "≤ 3x",
        "5",
    )
    assert Row.failed("m", "boom").met == "failed"
    assert Row("m", "1").anchor == Row("m", "1").ratio == NONE


def test_number_and_ratio_helpers() -> None:
    assert number(1234.56) == "1,234.6"
    assert number(1234.56, 0) == "1,235"
    assert number(math.nan) == NONE
    assert ratio(0.0834, 3, "time") == "0.083x time"
    assert ratio(2.0) == "2.00x"
    assert ratio(math.inf) == ratio(math.nan) == NONE


def test_text_table_aligns_columns_and_numbers_notes() -> None:
    text = format_text(fake_table())
    lines = text.splitlines()
    assert lines[0] == "CPUs 2, Python 3.11.7"
    header, rule, *body = lines[2:9]
    assert header.split() == HEADER
    assert set(rule.replace(" ", "")) == {"-"}
    # Every column starts at the same offset on every line.
    starts = [header.index(name) for name in HEADER]
    for line in body:
        for start in starts[1:]:
            assert line[start - 2 : start] == "  ", line
    assert body[0].startswith("alpha: fast thing ")
    assert body[0].split()[-1] == "yes"
    assert body[2].endswith("yes [1]")
    assert body[3].startswith("beta: every measure ") and body[3].endswith("skipped [2]")
    # Identical notes share a number.
    assert body[4].endswith("n/a [1]")
    assert lines[-2:] == ["[1] heap only", "[2] needs a model"]
    assert text.endswith("\n")


def test_markdown_table_escapes_pipes() -> None:
    text = format_markdown(fake_table())
    lines = text.splitlines()
    assert lines[0] == "Machine: CPUs 2, Python 3.11.7."
    assert lines[2] == "| measure | emelex | anchor | ratio | goal | met |"
    assert lines[3] == "|---|---|---|---|---|---|"
    assert lines[5] == (
        "| alpha: slow \\| piped thing | 30 ms | bare 3 ms | 10.0x time | ≤ 2 ms | no |"
    )
    assert all(line.count(" | ") == 5 for line in lines[4:9])
    assert lines[-2:] == ["1. heap only", "2. needs a model"]


def test_json_has_machine_sections_and_rows() -> None:
    loaded = json.loads(format_json(fake_table()))
    assert loaded["machine"] == {"CPUs": 2, "Python": "3.11.7"}
    assert loaded["benchmarks"] == [
        {"name": "alpha", "status": "ok", "seconds": 1.5, "detail": ""},
        {"name": "beta", "status": "skipped", "seconds": None, "detail": "needs a model"},
        {"name": "gamma", "status": "ok", "seconds": None, "detail": ""},
    ]
    assert [row["benchmark"] for row in loaded["rows"]] == ["alpha"] * 3 + ["beta", "gamma"]
    assert loaded["rows"][0] == {
        "benchmark": "alpha",
        "measure": "fast thing",
        "emelex": "1.0 µs",
        "anchor": "bare 2.0 µs",
        "ratio": "2.00x speed",
        "goal": "≥ 0.5x",
        "met": "yes",
        "note": "",
    }


def test_a_saved_table_prints_the_same() -> None:
    table = fake_table()
    loaded = from_json_dict(json.loads(format_json(table)))
    assert format_text(loaded) == format_text(table)
    assert format_markdown(loaded) == format_markdown(table)


def test_rows_survive_the_trip_from_a_child() -> None:
    rows = [row for section in fake_table().sections for row in section.rows]
    assert rows_from_json(rows_to_json(rows)) == rows


def test_harness_rows_without_competitors_are_skipped_with_the_reason() -> None:
    from benchmarks import harness

    def latency(seconds: float, stopped: float | None = None) -> harness.CancelLatency:
        measured = harness.CancelLatency()
        measured.samples.extend([seconds] * 10)
        measured.slowest.append(seconds)
        if stopped is not None:
            measured.stopped.extend([stopped] * 10)
        return measured

    settings = harness.parse_settings(["--quick"])
    timing = harness.TurnTiming([0.0006] * 10, 0.0006)
    competitors = [harness.CompetitorResult(name) for name, _ in harness.COMPETITOR_SCRIPTS]
    measured = harness.Measurements(
        settings,
        [timing],
        [timing],
        competitors,
        "competitors not installed: run `...`",
        {0: 600.0},
        [60_000.0],
        {0: [30_000.0], 100: [40_000.0]},
        (latency(0.03, 0.0015), latency(0.02, 0.01), latency(0.004), latency(0.0005)),
        harness.MemoryResult(3.0, 0, 0),
    )
    rows = harness.summary_rows(measured)
    assert [row.met for row in rows] == [
        "skipped",
        "skipped",
        "yes",
        "yes",
        "no",
        "no",
        "no",
        "no",
        "no",
        "yes",
    ]
    assert rows[0].emelex == "600"
    assert rows[0].note == "competitors not installed: run `...`"
    assert rows[2].ratio == "1.50x speed"
    # Tools stopped (AgentCancellation, then CancelScope): ratios to bare Trio's p99.
    assert rows[3].emelex == "1.50 ms"
    assert rows[3].ratio == "0.38x time"
    assert rows[3].goal == "≤ 1.2x"
    assert rows[4].emelex == "10.00 ms"
    # Then every session.run raised, p50 and p99 of each way, against bare Trio's.
    assert [row.measure.split(", ")[1] for row in rows[5:9]] == ["p50", "p99", "p50", "p99"]
    assert rows[5].emelex == "30.00 ms"
    assert rows[5].ratio == "7.5x time"
    assert rows[5].goal == "≤ 2x"
    assert rows[7].emelex == "20.00 ms"

    competitors[1].rounds_us.append(6_000.0)
    competitors[1].version = "1.2"
    competitors[2].error = "exit 1: boom"
    rows = harness.summary_rows(measured)
    assert rows[0].met == "yes"
    assert rows[0].anchor == "langgraph (2-node graph) 6,000"
    assert rows[0].ratio == "0.100x time"
    assert "failed: openai-agents" in rows[0].note


def test_temporal_rows_without_competitors_are_skipped_with_the_reason() -> None:
    pytest.importorskip("temporalio")
    from benchmarks import temporal

    measured = temporal.Measured(10, 2, [200.0, 202.0], [198.0, 200.0], [35.0], [34.0])
    measured.competitors = [
        temporal.Competitor(name, script) for name, script in temporal.COMPETITOR_SCRIPTS
    ]
    measured.missing = "competitors not installed: run `...`"
    rows = temporal.summary_rows(measured)
    assert [row.met for row in rows] == ["yes", "n/a", "n/a", "skipped", "skipped", "skipped"]
    assert rows[0].ratio == "1.01x time"
    assert rows[3].emelex == "201.0 ms"
    assert rows[3].note == "competitors not installed: run `...`"

    bare, agents, pydantic = measured.competitors
    bare.rounds_ms, bare.rounds_cpu_ms = [150.0], [20.0]
    agents.version, agents.rounds_ms, agents.rounds_cpu_ms = "1.1.0", [100.5], [70.0]
    pydantic.error = "exit 1: boom"
    rows = temporal.summary_rows(measured)
    assert [row.met for row in rows] == ["yes", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "failed"]
    assert rows[5].anchor == "openai-agents on Temporal 1.1.0 100.5 ms"
    assert rows[5].ratio == "2.00x time"
    assert rows[5].note.endswith("against emelex's floor 0.51x")
    assert rows[6].ratio == "0.50x time"
    assert rows[7].note == "exit 1: boom"


def test_an_unimportable_benchmark_is_skipped_not_fatal() -> None:
    section = runner.run_benchmark(
        "missing", quick=True, timeout=60, quiet=True, module="benchmarks._no_such_benchmark"
    )
    assert section.status == "skipped"
    assert [row.met for row in section.rows] == ["skipped"]
    assert "No module named 'benchmarks._no_such_benchmark'" in section.rows[0].note


def test_unknown_benchmark_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--only", "runtime,nope"]) == 2
    assert "unknown benchmark nope" in capsys.readouterr().err


def test_python_m_benchmarks_quick_runtime() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "runtime", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "run quick" in lines[0] and "CPUs" in lines[0]
    assert lines[2].split() == HEADER
    body = lines[4:]
    measures = [
        "actor spawn + join via start_soon",
        "DROP actor call + result via run",
        "mailbox put/get",
        "dedicated worker round trip",
    ]
    assert len(body) == len(measures)
    for line, measure in zip(body, measures, strict=True):
        assert line.startswith(f"runtime: {measure} ")
        assert "µs" in line and "x speed" in line
    assert "≥ 0.5x" in body[2] and body[2].split()[-1] in ("yes", "no")
    assert all(line.split()[-2:] == ["—", "n/a"] for line in (body[0], body[1], body[3]))
    assert "runtime: ok, 4 rows" in done.stderr
