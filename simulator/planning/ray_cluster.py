"""Connecting to Ray for `--backend ray`: the address checked before anything connects, the connection bounded in
time, SIGTERM honoured while it waits, and Ray's own log lines kept off the terminal.

`ray.init` alone takes any `RAY_ADDRESS` and fails late: `not-an-address` was a ValueError traceback; an address
nothing answers at retried past a minute, printing the C++ client's warnings, and a SIGTERM then did nothing (the
main thread waits inside Ray's C++ code, where Python's signal handlers do not run, and `ray.init` replaces the
CLI's SIGTERM handler with its own). So here: the address must read as one (`auto`, `local`, `HOST:PORT` or
`ray://HOST:PORT`); a `HOST:PORT` must accept a TCP connection within CONNECT_S; joining a cluster runs `ray.init`
on a thread of its own, which the main thread waits for in Python, so the CLI's SIGTERM handler runs (exit 143) and
a connection that takes longer than CONNECT_S is one line (exit 2); a local Ray's start hands a SIGTERM on to the
CLI's handler. Ray's stderr is kept off the terminal meanwhile.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from simulator.errors import InputError

CONNECT_S = 15.0  # a cluster's TCP answer and `ray.init` together
HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")  # a DNS name or an IPv4 address
ASKED = "RAY_BACKEND_LOG_LEVEL"  # set: the user asks for Ray's own log lines on the terminal


def address() -> str | None:
    """`RAY_ADDRESS` checked: None (unset: a local Ray), `auto`, `local` or `[ray://]HOST:PORT`."""
    given = os.environ.get("RAY_ADDRESS", "").strip()
    if not given:
        return None
    if given in ("auto", "local"):
        return given
    if _host_port(given) is None:
        raise InputError(
            f"RAY_ADDRESS {given!r}: not a Ray address (HOST:PORT of the head node, ray://HOST:PORT, auto or local)"
        )
    return given


def _host_port(given: str) -> tuple[str, int] | None:
    rest = given.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535 or len(port) > 5:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not HOST.fullmatch(host):
            return None
    return host, int(port)


def _reachable(given: str, timeout: float) -> None:
    """A head node's port that accepts a TCP connection within `timeout`, or one line saying it does not."""
    found = _host_port(given)
    if found is None:
        return  # auto, local: Ray finds (or starts) the cluster itself
    try:
        socket.create_connection(found, timeout=timeout).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else e.strerror or type(e).__name__
        raise InputError(f"RAY_ADDRESS {given}: no Ray cluster answers there within {CONNECT_S:g} s ({why})") from None


def connect(cpus: int) -> Any:
    """Ray, connected (to `RAY_ADDRESS`, else a local Ray of `cpus` CPUs); one line on any failure."""
    given = address()
    try:
        import ray
    except ImportError:
        raise InputError("--backend ray: Ray is not installed (pip install 'phaseplan[ray]')") from None
    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
    with _quiet_stderr():
        if given in (None, "local"):
            _start(ray, cpus, quiet)
        else:
            _join(ray, given, quiet)
    return ray


def _start(ray: Any, cpus: int, quiet: dict[str, Any]) -> None:
    """A local Ray, started on the main thread (the processes it starts die with the thread that started them).
    `ray.init` replaces the SIGTERM handler with one that exits 15: a SIGTERM it takes is handed on to the handler
    it replaced, which is put back afterwards."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(num_cpus=cpus, **quiet)
    except SystemExit as e:
        if e.code != signal.SIGTERM or not callable(handler):
            raise
        signal.signal(signal.SIGTERM, handler)
        signal.raise_signal(signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, handler)


def _join(ray: Any, given: str, quiet: dict[str, Any]) -> None:
    """A running cluster joined within CONNECT_S. `ray.init` runs on a thread of its own, so that Ray installs no
    SIGTERM handler and the main thread, waiting here in Python, runs the CLI's (Ray's C++ client would hold it
    for a minute, deaf to signals)."""
    deadline = time.monotonic() + CONNECT_S
    _reachable(given, CONNECT_S)
    failed: list[Exception] = []

    def init() -> None:
        try:
            ray.init(address=given, **quiet)
        except Exception as e:
            failed.append(e)

    thread = threading.Thread(target=init, name="ray-connect", daemon=True)
    thread.start()
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.1)
    if thread.is_alive():
        raise InputError(f"RAY_ADDRESS {given}: no Ray cluster answered within {CONNECT_S:g} s")
    if failed:  # Ray's own errors (ConnectionError, RuntimeError, ValueError) for a cluster it cannot join
        text = str(failed[0]).strip()
        first = text.splitlines()[0] if text else type(failed[0]).__name__
        raise InputError(f"RAY_ADDRESS {given}: cannot connect ({first[:200]})")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Ray's C++ client logs to stderr while it connects, and the processes it starts inherit it: stderr goes to
    /dev/null for the while, unless RAY_BACKEND_LOG_LEVEL asks for Ray's lines."""
    if ASKED in os.environ:
        yield
        return
    terminal = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(terminal, 2)
        os.close(terminal)
