"""``ember compare [BASE] CANDIDATE``: the regression gate a CI job runs.

The logic is ``ember.analysis.compare`` (metrics, causes, statistics, outputs) and
``ember.analysis.gate`` (the rule grammar and ``[tool.ember.gate]``); this module parses
the arguments, prints and sets the exit code: 0 every rule holds, 1 a rule broke, 2 the
input is bad (no such run or file, a rule that cannot be read).
"""

from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.markup import escape as esc
from rich.table import Table
from rich.text import Text

from ember.analysis import DatabaseBusyError
from ember.analysis.compare import (
    CompareError,
    Comparison,
    compare_refs,
    show,
    show_change,
    to_json,
    to_junit,
    to_markdown,
)
from ember.analysis.db import DEFAULT_DB
from ember.analysis.gate import RuleError, load_config
from ember.analysis.lake import LakeError

from .app import app, console, fail, parse_tags, write_out


class CompareFormat(enum.StrEnum):
    text = "text"
    markdown = "markdown"
    json = "json"


_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim"}
_VERDICT_STYLE = {"worse": "red", "better": "green"}


def _print_text(c: Comparison) -> None:
    # what runs, causes and rules say is text, never markup (the console's default): a
    # static value '[bold]' stays; only the lines styled here pass markup=True, their
    # user text escaped
    verdict = "[bold green]PASS[/]" if c.passed else "[bold red]FAIL[/]"
    base, cand = c.base, c.candidate
    console.print(
        f"{verdict}  base {esc(base.name)} · {esc(base.short_id)} ({esc(base.origin)})  ->  "
        f"candidate {esc(cand.name)} · {esc(cand.short_id)} ({esc(cand.origin)})",
        highlight=False,
        markup=True,
    )
    if c.rules:
        rules = Table(title=f"rules ({c.rules_origin})", title_justify="left")
        rules.add_column("rule")
        rules.add_column("result")
        rules.add_column("details", overflow="fold")
        for r in c.rules:
            rules.add_row(r.rule, Text(r.status, style=_STYLE[r.status]), r.message)
        console.print(rules)
    for x in c.new_causes:
        console.print(f"[red]new:[/] {esc(x.text)}", highlight=False, markup=True)
    for x in c.gone_causes:
        console.print(f"[green]gone:[/] {esc(x.text)}", highlight=False, markup=True)
    metrics = Table(title="metrics", title_justify="left")
    metrics.add_column("metric", no_wrap=True)
    for name in ("base", "candidate", "change"):
        metrics.add_column(name, justify="right", no_wrap=True)
    metrics.add_column("verdict", overflow="fold")
    notes = []
    for m in c.metrics:
        judged = Text(m.verdict, style=_VERDICT_STYLE.get(m.verdict, ""))
        if m.note:
            notes.append(f"{m.metric}: {m.note}")
            judged.append(f" ({len(notes)})")
        metrics.add_row(
            m.metric, show(m.base, m.unit), show(m.candidate, m.unit), show_change(m), judged
        )
    console.print(metrics)
    for i, note in enumerate(notes, 1):
        console.print(f"({i}) {note}", style="dim", highlight=False)


# one line per paragraph: rich keeps a help paragraph's line breaks where they are
_HELP = (
    "Compare a candidate run with its baseline; exit 1 when a rule breaks (a CI gate).\n\n"
    "Every run_summary metric side by side with its change and verdict, latency compared as "
    "distributions (noise does not fail builds), new recompile causes, evictions and graph "
    "breaks by name. Exit 0: every rule holds; 1: a rule broke; 2: bad input."
)


@app.command(help=_HELP)
def compare(
    runs: list[str] = typer.Argument(
        ...,
        metavar="[BASE] CANDIDATE",
        help="Run ids (or unique starts of them) in --db, or trace files (.jsonl). "
        "Without BASE, give --baseline-tag.",
    ),
    db: Path = typer.Option(
        DEFAULT_DB,
        "--db",
        help="The DuckDB database (or lake folder) the run ids and baselines are in.",
    ),
    baseline_tag: list[str] = typer.Option(
        [],
        "--baseline-tag",
        help="KEY=VALUE: the base is the latest run with these tags (repeatable), "
        "e.g. branch=main.",
    ),
    baseline_db: Path | None = typer.Option(
        None, "--baseline-db", help="Where --baseline-tag looks (default: --db)."
    ),
    fail_on: str | None = typer.Option(
        None,
        "--fail-on",
        help="Rules, e.g. 'recompiles>0, evictions>+0, latency_p50>+10%, peak>+5%, "
        "new_breaks>0' ('none': report only). Default: \\[tool.ember.gate] fail-on in "
        "pyproject.toml, else the built-in defaults.",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The pyproject.toml to read (default: the nearest one)."
    ),
    format: CompareFormat = typer.Option(
        CompareFormat.text, "--format", "-f", help="text | markdown | json."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (same as --format json)."),
    junit: Path | None = typer.Option(
        None, "--junit", help="Also write JUnit XML here: one test case per rule."
    ),
) -> None:
    """``ember compare``: what it does is ``_HELP``."""
    if len(runs) > 2:
        raise fail(f"give at most two runs (BASE CANDIDATE), not {len(runs)}", 2)
    base, candidate = (runs[0], runs[1]) if len(runs) == 2 else (None, runs[0])
    for ref in runs:  # a folder is neither a run id nor a trace file: it was read as an id
        if Path(ref).is_dir():
            raise fail(f"{ref}: is a folder; give a run id in --db or one trace file (.jsonl)", 2)
    tags = parse_tags(baseline_tag, "--baseline-tag")
    if config is not None and not config.is_file():
        raise fail(f"--config {config}: no such file", 2)
    try:
        gate = load_config(fail_on, pyproject=config)
        result = compare_refs(
            base, candidate, gate, db=db, baseline_tags=tags or None, baseline_db=baseline_db
        )
    except (CompareError, RuleError, DatabaseBusyError, LakeError) as exc:
        # exit 2, not the app's 1 for a LakeError: compare's 1 means a broken rule
        raise fail(str(exc), 2) from None
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(to_junit(result), encoding="utf-8")
    if as_json or format is CompareFormat.json:
        write_out(to_json(result))
    elif format is CompareFormat.markdown:
        write_out(to_markdown(result))
    else:
        _print_text(result)
    raise typer.Exit(result.exit_code)
