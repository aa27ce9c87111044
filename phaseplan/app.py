"""`phaseplan app`: the planner page served by Streamlit, headless and with usage statistics off.

The command line is built here once, so `make app`, the verb and the browser test serve the page the same way.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import click

from simulator.errors import InputError

PAGE = Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py"
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")  # a host name or an IPv4/IPv6 address: never an option
LAUNCHED = "PHASEPLAN_APP_LAUNCHED"  # the wall-clock time `phaseplan app` started, for app.serve's line
MAX_UPLOAD_MB = 1  # the browser refuses bigger files; the page itself takes at most 256 KiB of scenario


def command(port: int, address: str = "localhost") -> list[str]:
    """The `streamlit run` command line that serves the page on `address:port`."""
    return [
        sys.executable,
        "-m",
        "app.serve",  # streamlit's own command line, with the page's code loaded before it listens
        "run",
        str(PAGE),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--browser.gatherUsageStats",
        "false",
        "--server.maxUploadSize",
        str(MAX_UPLOAD_MB),
        "--client.toolbarMode",
        "minimal",  # a planner's page: no Deploy button or developer menu
    ]


def serve(port: int, address: str) -> None:
    """Replace this process by the Streamlit server (Ctrl-C stops it)."""
    if not HOST.fullmatch(address):  # it becomes a word of Streamlit's command line
        raise InputError(f"--address {address!r}: not a host name or an IP address")
    if importlib.util.find_spec("streamlit") is None:
        raise click.ClickException("the app needs Streamlit: pip install -e '.[app]'")
    click.echo(
        "phaseplan planner: starting (the bundled studies' opening runs first); its address follows once it listens",
        err=True,
    )
    os.environ[LAUNCHED] = repr(time.time())  # app.serve says how long launch to listening took
    cmd = command(port, address)
    os.execv(cmd[0], cmd)
