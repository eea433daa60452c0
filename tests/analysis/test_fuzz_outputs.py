"""Fuzzing the outputs with hypothesis: tags (run names, cause texts, query values) drawn
from Markdown, HTML and control characters must leave every output well-formed and show
the tag as the text it is (issue 25). Markdown is parsed by markdown-it-py (CommonMark with
GitHub's tables), JUnit XML by the standard library, JSON by ``json``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from ember.analysis.compare import Cause, RunData, compare, to_json, to_junit, to_markdown
from ember.analysis.escape import md_text, visible, xml_text
from ember.analysis.gate import GateConfig, parse_rules
from ember.cli.tables import markdown_text

# what Markdown, HTML and terminals read, with some letters and non-ASCII text
ALPHABET = st.sampled_from(
    list("#*_`~[]()!<>|&\\-+=:$.;/'\" \t\n\r\x00\x07\x1b\x7f\x85\u2028aZ1é漢🙂")
    + ["<!--", "-->", "```", "**", "](", "http://e.x", "&amp;", "<script>", "\r\n", "    "]
)
TAGS = st.lists(ALPHABET, min_size=1, max_size=30).map("".join)
FORBIDDEN = {"html_block", "html_inline", "link_open", "image", "code_inline", "fence"}
FORBIDDEN |= {"code_block", "heading_open", "hr", "strong_open", "em_open", "s_open"}
MD = MarkdownIt("commonmark").enable("table")


def text_of(inline) -> str:
    return "".join(c.content for c in inline.children if c.type == "text")


def tokens_of(md: str) -> tuple[list, set[str]]:
    tokens = MD.parse(md)
    kinds = {t.type for t in tokens} | {c.type for t in tokens for c in t.children or ()}
    return tokens, kinds


def run(run_id: str, name: str, causes: list[Cause] = (), **summary) -> RunData:
    times = np.random.default_rng(len(run_id)).lognormal(14, 0.1, 40)
    row = {"run_id": run_id, "name": name, "calls": 40, "recompiles": 0, "evictions": 0}
    row |= {"failed_calls": 0, "hit_rate": 0.9, "latency_of": "call"}
    row |= {"latency_kind": "to results", "p50_ns": float(np.median(times)), **summary}
    return RunData(run_id, "fuzz", row, times, {f"{c.kind}|{c.key}": c for c in causes})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tag=TAGS, other=TAGS)
def test_compare_outputs_stay_well_formed_whatever_the_tags(tag: str, other: str) -> None:
    cause = Cause("recompile", "k", "position 0", tag, 3, f"{tag} changed: {other}")
    base = run(tag, tag)
    cand = run(other, other, [cause], recompiles=3)
    c = compare(base, cand, GateConfig(parse_rules("recompiles>+0, evictions>+0"), other))

    tokens, kinds = tokens_of(to_markdown(c))
    assert not kinds & FORBIDDEN - {"heading_open", "strong_open"}  # its own title, **New**
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h3"]
    rows = [t for t in tokens if t.type == "tr_open"]
    assert len(rows) == 3 + 1 + len(c.metrics)  # two tables, every row where it belongs
    texts = [text_of(t).rstrip() for t in tokens if t.type == "inline"]
    # the tag, as its characters (a paragraph ends without its trailing spaces)
    assert f"new: {visible(cause.text)}".rstrip() in texts
    assert f"rules from {visible(other)}".rstrip() in texts

    root = ET.fromstring(to_junit(c))  # well-formed whatever the characters
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert (props["base"], props["rules_from"]) == (xml_text(tag), xml_text(other))
    failure = root.find("testsuite/testcase/failure")
    assert xml_text(cause.text) in failure.text

    doc = json.loads(to_json(c))
    assert (doc["base"]["run_id"], doc["new_causes"][0]["text"]) == (tag, cause.text)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(TAGS, min_size=1, max_size=4), name=TAGS)
def test_query_markdown_is_one_table_whatever_the_values(values: list[str], name: str) -> None:
    frame = pl.DataFrame({name: values, "n": list(range(len(values)))})
    tokens, kinds = tokens_of(markdown_text(frame))
    assert not kinds & FORBIDDEN
    assert [t.type for t in tokens].count("table_open") == 1
    cells = [text_of(t).strip() for t in tokens if t.type == "inline"]
    # a cell is trimmed of white space at its ends by the table syntax, nothing else changes
    assert cells == [
        visible(name).strip(),
        "n",
        *(x for i, v in enumerate(values) for x in (visible(v).strip(), str(i))),
    ]


@given(tag=TAGS)
def test_md_text_is_text_in_a_paragraph_a_list_item_and_a_caption(tag: str) -> None:
    for md in (md_text(tag), f"- new: {md_text(tag)}", f"Showing **{md_text(tag)}**, the"):
        tokens, kinds = tokens_of(md)
        assert not kinds & (FORBIDDEN - {"strong_open"})
        shown = "".join(text_of(t) for t in tokens if t.type == "inline")
        assert visible(tag).strip() in shown
