"""The command that computes what a view shows, printed whole (wrapped, never cut off); for an upload, the
scenario it names as a download beside it, since that file exists only in the browser that sent it."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.scenario_io import Study


def show(study: Study, line: str, key: str) -> None:
    st.code(line, language="bash", wrap_lines=True)
    if study.upload is not None:
        name = Path(study.path).name
        a, b = st.columns([1, 3], vertical_alignment="center")
        a.download_button(name, study.upload, file_name=name, mime="application/x-yaml", key=f"dl-upload:{key}")
        b.caption(f"save it as {study.path} (its relative file names resolve from scenarios/) to run the command")
