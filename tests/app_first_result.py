"""Time to first result in the page, per bundled study (a measurement, not a test: `python tests/app_first_result.py
[STUDY ...]`, study names measuring only those).

For each study: a fresh server (`phaseplan app`'s command), a headless Debian chromium opening
`?study=NAME&view=What-if`, and the seconds until its first headline number shows — the study's default run
included (cold). Then twice more with the run answered from the server's cache, so what is left is the page
itself: in a second tab of the same browser (warm: the page's scripts in the browser's cache, as on a planner's
second visit) and in a fresh browser profile (nothing cached in the browser). Last, the simulation alone in this
process (`app.runs.run`, warm), for scale.
"""

from __future__ import annotations

import platform
import sys
import time
from typing import Any

from browser import chromium, missing, served

from app import runs, scenario_io


def first_result(context: Any, url: str, study: str) -> float:
    """Seconds from opening the study's What-if view in a new tab of `context` to its TTFT p95 showing."""
    page = context.new_page()
    start = time.perf_counter()
    page.goto(f"{url}/?study={study}&view=What-if")
    page.locator("[data-testid=stMetric]").filter(has_text="TTFT p95").first.wait_for(timeout=300_000)
    took = time.perf_counter() - start
    page.close()
    return took


def main() -> None:
    reason = missing()
    if reason:
        raise SystemExit(reason)
    only = set(sys.argv[1:])
    print(f"# {platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}")
    print("study, cold server s, warm (second tab) s, warm (fresh browser) s, simulation alone s, requests run")
    viewport = {"width": 1400, "height": 1000}
    for path in (p for p in scenario_io.bundled() if not only or p.stem in only):
        with served() as url, chromium() as browser:
            context = browser.new_context(viewport=viewport)
            cold = first_result(context, url, path.stem)
            tab = first_result(context, url, path.stem)
            fresh = first_result(browser.new_context(viewport=viewport), url, path.stem)
        study = scenario_io.from_path(path)
        runs.run(study, {})  # warm this process's compiled code, then time a fresh run of the study
        start = time.perf_counter()
        r = runs.run(study, {})
        alone = time.perf_counter() - start
        print(
            f"{path.stem}, {cold:.1f}, {tab:.1f}, {fresh:.1f}, {alone:.2f}, {r.result['metrics']['requests']:,}",
            flush=True,
        )


if __name__ == "__main__":
    main()
