"""SQL: a read-only console over the database's tables and views, results as CSV."""

from __future__ import annotations

import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import db, state
from ember.dashboard.console import ConsoleRefused, run_console_query, to_csv

st.title("SQL console")
st.caption(
    "Read-only: one SELECT at a time over the tables and views below. Writes, ATTACH, COPY, "
    "INSTALL/LOAD, SET and reading other files are refused."
)

relations = db.relations()
with st.expander(f"Tables and views ({len(relations)})"):
    st.dataframe(
        {"name": list(relations), "type": list(relations.values())},
        hide_index=True,
        width="stretch",
    )

default_sql = state.get_param("sql") or "SELECT * FROM runs LIMIT 100"
sql = st.text_area("Query", value=default_sql, height=140, key="ember_sql_text")
if st.button("Run", type="primary", key="ember_sql_run") or state.get_param("sql"):
    state.set_param("sql", sql)
    try:
        result = run_console_query(db.db_version(), sql)
    except ConsoleRefused as e:
        st.error(f"Refused: {md_text(e)}")
    else:
        frame = result.frame
        st.caption(f"{frame.height:,} rows{result.note}")
        st.dataframe(frame, hide_index=True, width="stretch", key="ember_sql_result")
        st.download_button(
            "Download CSV",
            data=to_csv(frame),
            file_name="ember-query.csv",
            mime="text/csv",
            key="ember_sql_csv",
        )
