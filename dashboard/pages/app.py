"""Entry point of the Ember dashboard: ``ember dashboard``, or ``streamlit run`` of this file.

It lives in ``pages/`` on purpose: Streamlit treats a folder named ``pages`` *next to* the
entry script as an old-style page folder and then runs a page requested by URL without
running the entry script (no login check, no navigation). With the entry inside the
folder there is no such sibling, and ``st.navigation`` below defines the pages.

The database comes from ``$EMBER_DASHBOARD_DB`` (``ember dashboard --db`` sets it). When
``.streamlit/secrets.toml`` has an ``[auth]`` section, every page asks for an OpenID
Connect login first (see dashboard/README.md).
"""

from __future__ import annotations

import time
from pathlib import Path

# Imported here, whole, before any page draws a chart: Altair looks pandas and numpy up in
# sys.modules (no import), so while one session's thread is still importing pandas another
# session's chart saw the half-made module ("partially initialized module 'pandas' has no
# attribute 'Timestamp'", two pages opened at once on a fresh server). An import statement
# waits for a module another thread is importing; the lookup did not.
import numpy  # noqa: F401
import pandas  # noqa: F401
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import auth, db

_PAGES = Path(__file__).resolve().parent

st.set_page_config(page_title="Ember", page_icon=":fire:", layout="wide")

auth.require_login()

pages = [
    st.Page(_PAGES / "runs.py", title="Runs", icon=":material/list:", default=True),
    st.Page(_PAGES / "recompiles.py", title="Recompiles", icon=":material/replay:"),
    st.Page(_PAGES / "cache.py", title="Cache", icon=":material/cached:"),
    st.Page(_PAGES / "memory.py", title="Memory", icon=":material/memory:"),
    st.Page(_PAGES / "hub.py", title="Hub", icon=":material/cloud_download:"),
    st.Page(_PAGES / "calls.py", title="Calls", icon=":material/speed:"),
    st.Page(_PAGES / "compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page(_PAGES / "trends.py", title="Trends", icon=":material/trending_up:"),
    st.Page(_PAGES / "sql.py", title="SQL", icon=":material/terminal:"),
]
page = st.navigation(pages)

try:
    version = db.db_version()
except db.DatabaseError as e:
    st.error(md_text(e))
    st.stop()
st.sidebar.caption(f"Database: {md_text(version.path)}")

try:
    with db.page_connection():
        page.run()
except db.DatabaseBusy as e:
    # an ingest is writing the database: say so, and run the page again in a moment
    st.info(str(e), icon=":material/sync:")
    time.sleep(1.0)
    st.rerun()
