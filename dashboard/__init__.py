"""Ember's web dashboard: Streamlit pages over the analysis views (``ember dashboard``).

``db`` is the only way to the database (read-only, locked, cached per database version),
``console`` the read-only SQL console, ``state`` the URL query parameters, ``summary``
the per-run summary, ``charts`` the Altair charts and SQL-side downsampling, ``auth`` the
optional OpenID Connect login; ``pages/app.py`` is the Streamlit entry script and the
other modules of ``pages/`` are the pages. Never imports jax.
"""
