"""Text from a link (``?run=``) or from the traces (tags, run ids) is shown as text on every
page: Streamlit renders warnings, captions and notes as Markdown, so such text must not
become a link, an image, a heading or a code span (issue 25, item 7). What the app wrote
is parsed with a CommonMark parser (markdown-it-py) and its structure checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from ember.analysis.ingest.database import ingest
from tests.dashboard.apptest import open_page

DATA = Path(__file__).parent.parent / "data"
LINK = "[login](https://evil.example) ![x](https://evil.example/t.png) `x` <b>b</b>"
FORGED = "\n## PASS\n" + LINK
MARKUP = {"link_open", "image", "code_inline", "html_inline", "strong_open", "em_open"}


def structure(md: str) -> tuple[set[str], str]:
    """The kinds of block and inline tokens in ``md``, and its text as a reader sees it."""
    tokens = MarkdownIt("commonmark").parse(md)
    kinds = {t.type for t in tokens}
    inline = [c for t in tokens for c in t.children or ()]
    kinds |= {c.type for c in inline}
    return kinds, "".join(c.content for c in inline if c.type == "text")


def assert_text_only(md: str, *expected: str, own: set[str] = frozenset()) -> str:
    """``md`` has no markup but the page's ``own`` (its bold, its code spans); returns
    its text."""
    kinds, text = structure(md)
    assert not kinds & (MARKUP - own | {"heading_open", "html_block", "fence"}), (kinds, md)
    for part in expected:
        assert part in text, (part, text)
    return text


def test_a_link_in_the_url_is_shown_as_text_in_the_warning() -> None:
    def page() -> None:
        from ember.dashboard import state

        labels = {"r1": "run one", "r2": "run two"}
        state.select_param("Run", "run", ["r1", "r2"], labels=labels)

    at = AppTest.from_function(page)
    at.query_params["run"] = "`x" + LINK
    at.run()
    (warning,) = at.warning
    assert_text_only(warning.value, f"run=`x{LINK} from the link is not in this database")


def test_labels_from_the_traces_are_text_in_the_ambiguous_link_warning() -> None:
    def page() -> None:
        from ember.dashboard import state

        link = "[login](https://evil.example) ![x](https://evil.example/t.png) `x` <b>b</b>"
        labels = {"e57e1": "**bold** " + link, "e57e2": "# h"}  # the function's own source
        state.select_param("Run", "run", ["e57e1", "e57e2"], labels=labels)

    at = AppTest.from_function(page)
    at.query_params["run"] = "e57e"
    at.run()
    (warning,) = at.warning
    assert_text_only(warning.value, "starts 2 ids: **bold** " + LINK + "; # h. Showing **bold**")
    assert at.selectbox(key="ember_sel_run").value == "e57e1"


@pytest.fixture
def forged_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two runs whose tags (the model name, shown as the run's label) are Markdown."""
    from ember.dashboard.db import DB_ENV

    lines = (DATA / "sweep.jsonl").read_text().splitlines(keepends=True)
    traces = []
    for i, model in enumerate(("a" + FORGED, "b" + LINK)):
        meta = json.loads(lines[0])
        meta["run_id"] = f"forged-{i}{LINK}"
        meta["tags"] = {"model": model, "team": LINK}
        meta["wall_time_ns"] += i * 10**9
        path = tmp_path / f"forged-{i}.jsonl"
        path.write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))
        traces.append(path)
    db = tmp_path / "forged.duckdb"
    assert all(f.status == "ok" for f in ingest(traces, db).files)
    monkeypatch.setenv(DB_ENV, str(db))
    return db


def page_markdown(at: AppTest) -> list[str]:
    """Everything the page wrote as Markdown: captions, notes, warnings, errors, text."""
    found = []
    for kind in ("caption", "markdown", "info", "warning", "error", "success"):
        found += [str(e.value) for e in getattr(at, kind)]
    return found


@pytest.mark.parametrize(
    ("page", "names_the_run"),
    [("runs.py", True), ("compare.py", True), ("cache.py", False), ("memory.py", False)]
    + [("hub.py", True), ("recompiles.py", False), ("calls.py", False)],
)
def test_tags_and_run_ids_from_the_traces_are_text_on_every_page(
    forged_db, page, names_the_run
) -> None:
    at = open_page(page)
    own = {"code_inline", "strong_open"}  # the pages' own `ember ingest` and **names**
    texts = [assert_text_only(md, own=own) for md in page_markdown(at)]
    if names_the_run:  # in a caption or note: the tag or id, shown as it is
        assert any(LINK in text for text in texts), texts
