"""Time to first result in the page, per bundled study (a measurement, not a test: `python tests/app_first_result.py`).

For each study: a fresh server (`phaseplan app`'s command), a headless Debian chromium opening
`?study=NAME&view=What-if`, and the seconds until its first headline number shows — the study's default run
included. Then the same in a second tab, when the run is answered from the cache: what is left is the page
itself. Last, the simulation alone in this process (`app.runs.run`, warm), for scale.
"""

from __future__ import annotations

import platform
import time

from browser import chromium, missing, served

from app import runs, scenario_io


def first_result(browser: object, url: str, study: str) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
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
    print(f"# {platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}")
    print("study, cold server s, cached run s, simulation alone s, requests run")
    for path in scenario_io.bundled():
        with served() as url, chromium() as browser:
            cold = first_result(browser, url, path.stem)
            warm = first_result(browser, url, path.stem)
        study = scenario_io.from_path(path)
        runs.run(study, {})  # warm this process's compiled code, then time a fresh run of the study
        start = time.perf_counter()
        r = runs.run(study, {})
        alone = time.perf_counter() - start
        print(f"{path.stem}, {cold:.1f}, {warm:.1f}, {alone:.2f}, {r.result['metrics']['requests']:,}", flush=True)


if __name__ == "__main__":
    main()
