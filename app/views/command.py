"""The command that computes what a view shows, printed whole (wrapped, never cut off); for an upload, the
scenario it names as a download beside it, since that file exists only in the browser that sent it."""

from __future__ import annotations

import html
from pathlib import Path

import streamlit as st

from app.scenario_io import Study

# A plain <pre>, not st.code: the code block's highlighter costs the browser ~0.5 s to load on a 2-core machine,
# most of the page's time to its first number; a shell line needs no colours.
STYLE = (
    "white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; padding: 0.75rem 1rem; border-radius: 0.5rem; "
    "background: rgba(128, 128, 128, 0.1); font-family: 'Source Code Pro', monospace; font-size: 0.85rem"
)


def show(study: Study, line: str, key: str) -> None:
    st.html(f'<pre class="phaseplan-command" style="{STYLE}">{html.escape(line)}</pre>')
    if study.upload is not None:
        name = Path(study.path).name
        a, b = st.columns([1, 3], vertical_alignment="center")
        a.download_button(name, study.upload, file_name=name, mime="application/x-yaml", key=f"dl-upload:{key}")
        b.caption(f"save it as {study.path} (its relative file names resolve from scenarios/) to run the command")
