"""``ember trends``: each model's (or tag value's) history of compiles, recompiles, evictions,
graph breaks, warm latency, compile time and peak memory, and the runs where a level
changed. The logic is ``ember.analysis.trends``; this module parses and prints."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import typer

from ember.analysis import format as fmt
from ember.analysis.trends import METRICS, ChangePoint, change_points, describe, series_points

from .analysis import DB_OPTION, open_database, since_time
from .app import app, console, fail, parse_tags

_METRIC_NAMES = ", ".join(METRICS)


def trend_lines(
    points: pl.DataFrame, found: list[ChangePoint], width: int, since: datetime | None = None
) -> list[str]:
    """What ``ember trends`` prints, at most ``width`` characters a line: per series its
    runs and span, each change point (a bullet, a hanging indent), the metrics that held
    (``since``: that held since then; ``found`` holds the change points since then)."""
    out: list[str] = []
    for (series,), rows in points.group_by(["series"], maintain_order=True):
        runs = rows["run_id"].n_unique()
        starts = [t for t in rows["started_at"].to_list() if isinstance(t, datetime)]
        span = f"{min(starts):%Y-%m-%d %H:%M} .. {max(starts):%Y-%m-%d %H:%M}" if starts else ""
        head = f"{series} · {fmt.plural(runs, 'run')}, {span}"
        out += fmt.wrap(head, width, "", "  ")
        mine = [c for c in found if c.series == series]
        for c in mine:
            out += fmt.wrap(describe(c), width, "  • ", "    ")
        held = [
            METRICS[m].label
            for m in METRICS
            if m in set(rows["metric"].to_list()) and not any(c.metric == m for c in mine)
        ]
        if held:
            when = f" since {since:%Y-%m-%d %H:%M}" if since else ""
            out += fmt.wrap(f"no change{when}: {', '.join(held)}", width, "  ", "  ")
        out.append("")
    return out


@app.command()
def trends(
    db: Path = DB_OPTION,
    model: str | None = typer.Option(None, "--model", help="Only this model's runs."),
    tag: list[str] = typer.Option(
        [], "--tag", help="Only runs with this tag (KEY=VALUE, e.g. branch=main); repeatable."
    ),
    by: str | None = typer.Option(
        None, "--by", help="One series per value of this tag (e.g. branch), not per model."
    ),
    metric: list[str] = typer.Option(
        [], "--metric", help="Only these metrics (repeatable): " + _METRIC_NAMES + "."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only change points from runs started since this date."
    ),
) -> None:
    """Each series' history across runs, and the runs where a level changed (PELT change
    points, each tested as `ember compare` tests two runs)."""
    tags, start = parse_tags(tag), since_time(since)
    with open_database(db, read_only=True) as con:
        try:
            points = series_points(con.sql, by=by, model=model, tags=tags, metrics=metric)
        except ValueError as exc:
            raise fail(str(exc), 2) from None
    if points.is_empty():
        filters = [f"--{name} {v}" for name, v in (("model", model), ("by", by)) if v]
        filters += [f"--tag {t}" for t in tag] + [f"--metric {m}" for m in metric]
        if filters:  # the runs may be there: it is the filters that keep them out
            console.print(
                f"no runs in {db} match {' '.join(filters)}: see `ember query --db {db} "
                '"select run_id, tags from runs"` for the models and tags there are',
                highlight=False,
            )
        else:
            console.print(f"no runs in {db}: ingest traces with `ember ingest`", highlight=False)
        return
    found = change_points(points)
    if start is not None:
        found = [c for c in found if c.started_at is not None and c.started_at >= start]
    for line in trend_lines(points, found, console.width, start):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
