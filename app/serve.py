"""The page's server: `streamlit run`, with the page's modules imported and the simulator's compiled code loaded
before it listens. Streamlit imports a page's modules on its first visit; on a 2-core machine that is ~2 s the
first visitor would otherwise wait for (pandas, Altair, the simulator, numba's cached machine code).

    python -m app.serve run app/streamlit_app.py [streamlit options]   (what `phaseplan app` runs)
"""

from __future__ import annotations

import sys


def warm() -> None:
    """Import what the page imports and run a 32-request bundled study once, uncached: no answer is kept, only
    the code is loaded."""
    from app import runs, scenario_io
    from app.views import capacity, compare, plan, sidebar, whatif  # noqa: F401

    runs.run(scenario_io.from_path(scenario_io.SCENARIOS / "glm-5.2-weight-formats.yaml"), {})  # 32 requests


def main() -> None:
    warm()
    from streamlit.web import cli

    sys.exit(cli.main())


if __name__ == "__main__":
    main()
