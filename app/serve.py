"""The page's server: `streamlit run`, with the page's modules imported, the simulator's compiled code loaded and
every bundled study's opening run in the server's run cache before it listens. Streamlit imports a page's modules
on its first visit; on a 2-core machine that is ~2 s the first visitor would otherwise wait for (pandas, Altair,
the simulator, numba's cached machine code), and the heaviest studies' opening runs 3-3.5 s more.

    python -m app.serve run app/streamlit_app.py [streamlit options]   (what `phaseplan app` runs)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request


def warm() -> None:
    """Import what the page imports, then run each bundled study as the page opens it into the server's cache
    (the same runs a first visitor would wait for; a study that fails to load is left to the page to report)."""
    from app import knobs, runs, scenario_io
    from app.views import capacity, compare, plan, sidebar, whatif  # noqa: F401
    from simulator.errors import InputError

    start = time.perf_counter()
    for path in scenario_io.bundled():
        try:
            study = scenario_io.from_path(path)
            runs.run(study, knobs.opening(study.scenario, study.raw), runs.SERVER)
        except InputError:
            continue
    took = time.perf_counter() - start
    print(f"phaseplan app: the bundled studies' opening runs computed in {took:.1f} s", file=sys.stderr)


def _option(name: str, default: str) -> str:
    """A `--server.NAME VALUE` option of this process's Streamlit command line."""
    args = sys.argv
    return args[args.index(name) + 1] if name in args[:-1] else default


def announce(url: str, launched: float, timeout_s: float = 600.0) -> None:
    """Once the server answers its health check: its address, and the seconds from launch to listening (so the
    address is never printed before anyone can open it)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    took = time.time() - launched
                    print(
                        f"phaseplan planner listening on {url}, {took:.1f} s after launch (Ctrl-C stops it)",
                        file=sys.stderr,
                        flush=True,
                    )
                    return
        except OSError:
            pass
        time.sleep(0.2)


def main() -> None:
    launched = float(os.environ.pop("PHASEPLAN_APP_LAUNCHED", "") or time.time())
    warm()
    from streamlit.web import cli

    host = _option("--server.address", "localhost")
    host = "localhost" if host in ("0.0.0.0", "::") else f"[{host}]" if ":" in host else host
    url = f"http://{host}:{_option('--server.port', '8501')}"
    threading.Thread(target=announce, args=(url, launched), daemon=True).start()
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
