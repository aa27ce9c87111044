"""The URL as the session opened it: a widget's default must not follow the URL the page itself rewrites (a
changed default is a new widget in Streamlit, which would reset it to that default on every pick)."""

from __future__ import annotations

import streamlit as st


def opened_with(name: str) -> str | None:
    """The query parameter `name` as the session's first run saw it."""
    key = f"url:{name}"
    if key not in st.session_state:
        st.session_state[key] = st.query_params.get(name)
    return st.session_state[key]
