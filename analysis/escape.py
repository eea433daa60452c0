"""Strings a user or a pull request controls (run names, tags, model and node names, paths)
made safe to put into Markdown and XML: shown as the text they are, never as markup.

A tag of ``"\\n\\n## PASS: every rule holds\\n<!--"`` written into a CI job summary as it
is makes a heading and hides the rest of the page in an HTML comment; the same text in
an XML attribute with a control character in it makes the file unreadable. Each output
format has one function here, and every surface that writes user text goes through it
(``ember compare --format markdown/--junit``, ``ember query --format markdown``, the
dashboard's captions and warnings, which Streamlit renders as Markdown).
"""

from __future__ import annotations

import re
import string

__all__ = ["md_text", "terminal_text", "visible", "xml_text"]

# Unicode's bidirectional embeddings, overrides and isolates (U+202A-202E, U+2066-2069):
# invisible, and one without its closing PDF/PDI reverses the rest of the line as shown,
# so a run tag could make a summary line read otherwise than it is ("Trojan Source").
_BIDI = "\u202a-\u202e\u2066-\u2069"
# C0 and C1 control characters and DEL: invisible, and some (ESC) drive a terminal.
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
# What may not reach a terminal as it is: the same, but tab and line feed, which lay out
# what the command prints itself (a table's rows, a report's lines).
_NOT_TERMINAL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
# Characters XML 1.0 does not allow at all, even escaped (tab and LF are allowed), and CR,
# which every XML parser reads back as LF (end-of-line handling).
# The bidirectional controls are allowed but written as escapes too (see ``_BIDI``).
_NOT_XML = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\ud800-\\udfff\\ufffe\\uffff{_BIDI}]")
# CommonMark: "Any ASCII punctuation character may be backslash-escaped" and then stands
# for itself. Escaping every one (not a chosen few) also covers GFM's tables (|),
# strikethrough (~) and autolinks, and Streamlit's :color[...] and $math$.
_MD_ESCAPES = str.maketrans({c: "\\" + c for c in string.punctuation})


def _escape(m: re.Match[str]) -> str:
    """A matched character as Python writes it in a string literal (``\\x1b``, ``\\u202e``)."""
    return repr(m.group(0))[1:-1]


def visible(text: object) -> str:
    """``text`` with each control character written as its escape (``\\n``, ``\\x1b``), so
    it can neither break a line nor hide in one."""
    return _CONTROL.sub(_escape, str(text))


def terminal_text(text: object) -> str:
    """``text`` for a terminal: each control character but tab and line feed, and each
    bidirectional control, written as its escape (``\\x1b``, ``\\u202e``), so that no
    colour, cursor move, hyperlink or reversed line comes from it."""
    return _NOT_TERMINAL.sub(_escape, str(text))


def md_text(text: object) -> str:
    """``text`` for a Markdown line (a paragraph, a list item or a table cell): every ASCII
    punctuation character backslash-escaped, line breaks and other control characters shown
    as escapes, so it renders as exactly these characters and cannot end the line, open a
    heading, a link, an image, a code span, an HTML comment or a new table cell."""
    escaped = visible(text).translate(_MD_ESCAPES)
    body = escaped.lstrip(" ")
    # spaces that start a line would indent it into a code block: a character reference
    # is a space that does not count as indentation
    return "&#32;" * (len(escaped) - len(body)) + body


def xml_text(text: object) -> str:
    """``text`` for an XML attribute or element (ElementTree escapes ``<&>"`` itself): the
    characters XML 1.0 forbids (most control characters) and CR written as escapes (``\\x1b``,
    ``\\r``) instead of making the document unreadable or changing on the way."""
    return _NOT_XML.sub(_escape, str(text))
