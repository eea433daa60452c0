"""The selected run and the filters, kept in the URL's query parameters.

A link copied from the address bar opens the same view for a colleague. Streamlit
clears query parameters when the sidebar switches pages, so the values are mirrored in
the session and written back to the URL on the next page: a selection survives page
changes and stays shareable.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import overload

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ember.analysis.escape import md_text
from ember.analysis.runs import matching

__all__ = ["get_param", "is_default", "multiselect_param", "select_param", "set_param"]

_SESSION_PREFIX = "ember_qp_"
_AUTO_PREFIX = "ember_auto_"


@overload
def get_param(name: str, default: str) -> str: ...
@overload
def get_param(name: str, default: None = None) -> str | None: ...
def get_param(name: str, default: str | None = None) -> str | None:
    """The value of ``?name=`` in the URL, else the one kept from an earlier page."""
    value = st.query_params.get(name)
    if value is None:
        value = st.session_state.get(_SESSION_PREFIX + name)
        if value is not None:
            st.query_params[name] = value
    return default if value is None else str(value)


def set_param(name: str, value: str | None) -> None:
    """Put ``value`` in the URL and the session (``None`` or ``""`` removes it)."""
    if value is None or value == "":
        st.query_params.pop(name, None)
        st.session_state.pop(_SESSION_PREFIX + name, None)
    else:
        st.query_params[name] = value
        st.session_state[_SESSION_PREFIX + name] = value


def select_param(
    label: str,
    name: str,
    options: Sequence[str],
    *,
    default: str | None = None,
    where: DeltaGenerator | None = None,
    help: str | None = None,
    labels: Mapping[str, str] | None = None,
    prefer: Collection[str] | None = None,
) -> str | None:
    """A selectbox whose choice lives in ``?name=``.

    The URL may give an option or a unique start of one (a short run id, ``?run=e57e161d``,
    as the pages show them); a start that several options share selects the first of them
    and lists them all; an unknown value is ignored, with a warning. ``labels`` show a
    readable name for each option; the URL keeps the option itself.

    Until a link or a person picks a value, each page chooses its own default: ``default``
    if given, else the first option, or with ``prefer`` the first option in ``prefer`` (a
    page's runs that have data for it). ``is_default`` says whether the choice is one.
    """
    if not options:
        return None

    def shown(value: str | None) -> str:  # for Markdown: ids and labels come from the traces
        value = str(value)
        return md_text(labels.get(value, value) if labels else value)

    wanted = get_param(name)
    auto = wanted is None or is_default(name)
    unknown = None
    if wanted is not None and wanted not in options:
        found = matching(wanted, options)
        if len(found) > 1:
            listed = "; ".join(f"{shown(v)}" for v in found)
            st.warning(
                f"{md_text(f'{name}={wanted}')} from the link starts {len(found)} ids: {listed}. "
                f"Showing {shown(found[0])}; give more characters to pick one."
            )
        elif not found:
            unknown, auto = wanted, True
        wanted = found[0] if found else None
    if auto:
        pool = [o for o in options if prefer is None or o in prefer] or list(options)
        wanted = default if default in pool else pool[0]
    if unknown is not None:
        st.warning(
            f"{md_text(f'{name}={unknown}')} from the link is not in this database; "
            f"showing {shown(wanted)}."
        )
    selectbox = st.selectbox if where is None else where.selectbox
    choice = selectbox(
        label,
        options,
        index=options.index(wanted),
        key=f"ember_sel_{name}",
        help=help,
        format_func=(lambda v: labels.get(v, v)) if labels else str,  # plain text
        on_change=_picked,
        args=(name,),
    )
    set_param(name, choice)
    st.session_state[_AUTO_PREFIX + name] = auto and choice == wanted
    return choice


def is_default(name: str) -> bool:
    """True when ``?name=`` holds a default a page chose, not a link's or a person's pick."""
    return bool(st.session_state.get(_AUTO_PREFIX + name))


def _picked(name: str) -> None:
    st.session_state[_AUTO_PREFIX + name] = False


def multiselect_param(
    label: str, name: str, options: Sequence[str], *, where: DeltaGenerator | None = None
) -> list[str]:
    """A multiselect whose choices live in ``?name=a,b`` (empty means all)."""
    raw = get_param(name) or ""
    wanted = [v for v in raw.split(",") if v in options]
    multiselect = st.multiselect if where is None else where.multiselect
    chosen = multiselect(label, options, default=wanted, key=f"ember_ms_{name}")
    set_param(name, ",".join(chosen))
    return list(chosen)
