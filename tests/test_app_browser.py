"""End to end in a real browser: the page served on localhost, Debian's chromium driven by Playwright through the
capacity, what-if and compare views, checking the numbers against the simulator, with a screenshot of each view
(into $PHASEPLAN_SCREENSHOTS, else the test's temporary folder: `PHASEPLAN_SCREENSHOTS=docs/img` refreshes the
README's). Skipped where chromium or Playwright is missing, unless PHASEPLAN_REQUIRE_BROWSER=1 (CI), which makes
that a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import choose, chromium, metric, missing, served, snapshot

from app import scenario_io
from app.views.fmt import num
from simulator.capacity import capacity_report
from simulator.config import loader
from simulator.engine.run import simulate

STUDY = "kimi-k2.6-kv-formats"


def expected(*sets: str) -> dict:
    path = scenario_io.SCENARIOS / f"{STUDY}.yaml"
    return simulate(loader.load(path, sets)[0], path.parent)[0]["metrics"]


def test_capacity_whatif_compare_in_chromium(tmp_path: Path) -> None:
    reason = missing()
    if reason:
        if os.environ.get("PHASEPLAN_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PHASEPLAN_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    bf16, fp8 = expected(), expected("deployment.decode.kv_cache=fp8_e4m3")
    kv_tokens = capacity_report(scenario_io.from_path(scenario_io.SCENARIOS / f"{STUDY}.yaml").scenario)
    img = Path(os.environ.get("PHASEPLAN_SCREENSHOTS") or tmp_path)
    img.mkdir(parents=True, exist_ok=True)
    with served() as url, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{url}/?study={STUDY}")

        metric(page, "KV tokens per instance", num(kv_tokens["pools"]["decode"]["kv_tokens"]))
        assert "676,567" in page.inner_text("body")  # the BF16-cache row of the side-by-side table
        snapshot(page, img / "app-capacity.png")

        page.get_by_role("tab", name="What-if").click()
        metric(page, "output throughput", num(bf16["output_tokens_per_s"], "tok/s"))
        page.locator(".st-key-pin button").click()
        page.get_by_text("pinned:").first.wait_for()
        choose(page, "-deployment-decode-kv_cache", "fp8_e4m3")
        page.get_by_text("press Run simulation").first.wait_for()
        page.locator(".st-key-run button").click()
        metric(page, "output throughput", num(fp8["output_tokens_per_s"], "tok/s"))
        metric(page, "TPOT p95", num(fp8["tpot_ms"]["p95"], "ms"))
        assert "MODELED" in page.inner_text("body")
        snapshot(page, img / "app-whatif.png")

        page.get_by_role("tab", name="Compare & curves").click()
        table = page.locator("[data-testid=stTable]").filter(has_text="B − A").first
        table.wait_for()
        row = table.locator("tr").filter(has_text="output throughput").inner_text()
        assert num(bf16["output_tokens_per_s"], "tok/s") in row and num(fp8["output_tokens_per_s"], "tok/s") in row
        page.locator(".st-key-curves button").click()
        page.get_by_text("curve points (CSV)").wait_for(timeout=180_000)
        snapshot(page, img / "app-compare.png")
