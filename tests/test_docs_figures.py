"""Every figure README.md and docs/studies.md mark is what the code gives (tools/docs_figures.py: make docs-figures).

The cheap figures (capacity, init, the GLM-5.2 sweeps: seconds) are re-derived here by their commands. The
expensive ones (`plan`, `validate`, the Kimi KV sweep: minutes on this 2-core machine) are held to
docs/figures.json, which `make docs-figures` writes with the sha256 of each command's inputs (its scenario, the
presets, the validation corpus and bands, a profile): an input changed since is a failure until the figures are
derived again."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "tools" / "docs_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_figures"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


df = _tool()
RECORD = json.loads(df.FIGURES.read_text())
PAGES = df.pages()
README = PAGES["README.md"]


def test_the_pages_mark_every_figure_once_and_state_figures_json() -> None:
    written = df.marked(PAGES)
    assert sorted(written) == sorted(df.FIGS), "the pages' markers and tools/docs_figures.py's figures differ"
    assert df.check(RECORD, PAGES) == [], "run `make docs-figures`"


def test_figures_json_names_each_command_as_the_tool_runs_it() -> None:
    assert {s: v["command"] for s, v in RECORD["sources"].items()} == {s: df.command(s) for s in df.SOURCES}


@pytest.mark.parametrize("name", [k for k, (srcs, _) in df.FIGS.items() if all(df.SOURCES[s].cheap for s in srcs)])
def test_a_cheap_figure_is_what_its_command_gives_today(name: str, cheap: dict[str, str]) -> None:
    assert df.marked(PAGES)[name] == cheap[name], f"the pages' {name} drifted: run `make docs-figures`"


@pytest.fixture(scope="module")
def cheap() -> dict[str, str]:
    return df.cheap_figures()


def test_a_changed_input_or_figure_is_caught(tmp_path: Path) -> None:
    """The check itself: a figure README states otherwise, or an input whose hash is not the recorded one."""
    record = json.loads(json.dumps(RECORD))
    record["sources"]["plan"]["inputs_sha256"] = "0" * 64
    off = df.check(record, {**PAGES, "README.md": README.replace(df.MARK.search(README)["body"], "99 prefill", 1)})
    assert any("phaseplan plan" in o for o in off) and any("figure init " in o for o in off)


def test_a_marker_no_source_gives_is_refused() -> None:
    with pytest.raises(SystemExit, match="no source gives: nope"):
        df.write_page("README.md", README + "<!-- fig:nope -->x<!-- /fig -->", RECORD["figures"])


def test_format_pairs_are_ids_alike_but_for_one_format_and_int4_against_fp8_is_said_when_absent() -> None:
    """`_format_pairs` pairs ids that differ by one format only; the studies' sentence says no INT4/FP8 pair is
    published unless one is (an INT4/NVFP4 pair is not one)."""

    def case(i: str, published: float, loso: float) -> dict:
        return {"id": i, "metric": "mean_tpot_ms", "published": published, "loso_error": loso}

    validate = {"cases": [case("m-int4-c4", 10.0, 0.0), case("m-nvfp4-c4", 8.0, 0.1), case("m-bf16-c4", 9.0, 0.0)]}
    assert df._format_pairs(validate) == [("m-{int4,nvfp4}-c4", "TPOT", pytest.approx(0.1))]
    point = {"bands": {"output_tok_s": "±1% model error", "tpot_ms": "±2% model error"}}
    sweep = [
        {**point, "point": {k: v, "traffic.concurrency": c}}
        for k in ("deployment.decode.kv_cache", "deployment.decode.weights")
        for v in ("bf16", "fp8_e4m3", "fp8", "int4")
        for c in (1, 64)
    ]
    prefill = [{**point, "point": {"deployment.prefill.weights": "int4"}}]
    sources = {"kv": sweep, "weights": sweep, "prefill": prefill, "validate": validate}
    assert df.fig_studies_bands(sources).endswith("; no published pair compares INT4 with FP8 weights")
    validate["cases"].append(case("m-fp8-c4", 12.0, 0.0))
    assert not df.fig_studies_bands(sources).endswith("with FP8 weights")
