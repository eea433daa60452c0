"""Optional login through Streamlit's OpenID Connect support (``st.login``).

Off unless ``.streamlit/secrets.toml`` has an ``[auth]`` section. With it, a visitor who
is not logged in sees only a login button. ``[ember] allowed_domains = ["example.com"]``
further limits access to e-mail addresses of those domains (many identity providers let
anyone with an account log in).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

__all__ = ["login_configured", "require_login"]


def _secrets_section(name: str) -> dict[str, Any]:
    try:
        section = st.secrets.get(name)
    except Exception:  # no secrets.toml at all: Streamlit raises rather than returning None
        return {}
    return dict(section) if section else {}


def login_configured() -> bool:
    """Whether the secrets turn login on (an ``[auth]`` section)."""
    return bool(_secrets_section("auth"))


def require_login() -> None:
    """Stop the page unless login is off or the visitor is logged in (and allowed)."""
    if not login_configured():
        return
    if not st.user.get("is_logged_in", False):
        st.title("Ember")
        st.info("This dashboard needs a login.")
        st.button("Log in", on_click=st.login, type="primary")
        st.stop()
    allowed = [d.lower().lstrip("@") for d in _secrets_section("ember").get("allowed_domains", [])]
    email = str(st.user.get("email") or "")
    if allowed and email.rpartition("@")[2].lower() not in allowed:
        st.error(f"{email or 'This account'} is not allowed here (allowed: {', '.join(allowed)}).")
        st.button("Log out", on_click=st.logout)
        st.stop()
    with st.sidebar:
        st.caption(f"Logged in as {st.user.get('name') or email}")
        st.button("Log out", on_click=st.logout)
