"""The page's server: `streamlit run`, with the page's modules imported, the simulator's compiled code loaded and
every bundled study's opening run in the server's run cache before it listens. Streamlit imports a page's modules
on its first visit; on a 2-core machine that is ~2 s the first visitor would otherwise wait for (pandas, Altair,
the simulator, numba's cached machine code), and the heaviest studies' opening runs 3-3.5 s more.

    python -m app.serve run app/streamlit_app.py [streamlit options]   (what `phaseplan app` runs)
"""

from __future__ import annotations

import sys
import time


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


def main() -> None:
    warm()
    from streamlit.web import cli

    sys.exit(cli.main())


if __name__ == "__main__":
    main()
