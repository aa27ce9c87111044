"""The URL: the study, the view and the moved knobs (`?study=…&view=…&set=PATH=VALUE&set=…`), so a reload or a
shared link opens the same page. Read as the session opened it: a widget's default must not follow the URL the
page itself rewrites (a changed default is a new widget in Streamlit, which would reset it to that default on
every pick)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app import knobs
from app.scenario_io import Study


def opened_with(name: str) -> str | None:
    """The query parameter `name` as the session's first run saw it."""
    key = f"url:{name}"
    if key not in st.session_state:
        st.session_state[key] = st.query_params.get(name)
    return st.session_state[key]


def _opened_with_all(name: str) -> list[str]:
    key = f"url:{name}:all"
    if key not in st.session_state:
        st.session_state[key] = st.query_params.get_all(name)
    return st.session_state[key]


def knob_start(study: Study, start: dict[str, Any], options: dict[str, list[Any]], opened: str) -> dict[str, Any]:
    """Where the knobs start: `start` moved by the URL's `set` items while the page still shows the study the URL
    opened (`opened`; once another is picked, or for an upload, the study's own values), each checked as its
    widget would check it; what is refused is said in one line each, and that knob stays at `start`."""
    items = _opened_with_all("set")
    if study.upload is not None or Path(study.path).stem != opened:
        st.session_state["url:left"] = True
    if not items or st.session_state.get("url:left"):
        return start
    values, errors = knobs.from_url(items, start, options)
    if errors:  # the items as plain text, never Markdown: a crafted link's text must not become a link
        box = st.container(key="url-refused")
        box.warning("**Not taken from the URL** (those knobs start at the study's values):")
        box.text("\n".join(errors))
    return {**start, **values}


def follow_knobs(study: Study, start: dict[str, Any], chosen: dict[str, Any]) -> None:
    """Write the knobs moved from `start` (where the study opens) into the URL; none for an upload."""
    items = [] if study.upload is not None else knobs.url_items(start, chosen)
    if items:
        st.query_params["set"] = items
    else:
        st.query_params.pop("set", None)
