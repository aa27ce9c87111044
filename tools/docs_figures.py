"""Every figure README.md (and docs/studies.md) states, re-derived by the command that gives it: `make docs-figures`.

Each source below is one `phaseplan` command (run with `--json`); each figure is text made from sources' answers.
The script runs the sources, writes every figure into the pages between `<!-- fig:NAME -->` and `<!-- /fig -->`,
and records them in `docs/figures.json` with each source's command and the sha256 of the files its answer depends
on besides the code (its scenario, the presets, the validation corpus and bands, a profile).

Why the hash: `plan` and `validate` take minutes on this project's 2-core machine, too long for `make test`.
`tests/test_docs_figures.py` re-derives the cheap sources' figures and compares them with the pages; for the
expensive ones it holds the pages to `docs/figures.json` and that file's hashes to today's inputs, so a changed
scenario, preset or corpus fails the test until `make docs-figures` runs again. (A code change that moves an
expensive figure without touching those inputs is caught only when the script runs again.)

    python tools/docs_figures.py                 # run every source, write the pages and docs/figures.json
    python tools/docs_figures.py --only plan     # re-run some sources, keep the other figures from figures.json
    python tools/docs_figures.py --check         # run nothing: the pages against figures.json, hashes against inputs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/studies.md")  # the pages whose figures are marked
FIGURES = ROOT / "docs" / "figures.json"
MARK = re.compile(r"<!-- fig:(?P<name>[\w.-]+) -->(?P<body>.*?)<!-- /fig -->", re.DOTALL)

PRESETS = ("simulator/config/presets/**/*.yaml",)
CORPUS = ("validation/fit.yaml", "validation/bands.json", "validation/cases/*.yaml", "validation/scenarios/*.yaml")


@dataclass(frozen=True)
class Source:
    """One command: its `phaseplan` arguments, the files besides the code its answer depends on, and whether it is
    cheap enough (seconds) for the test to re-derive."""

    args: tuple[str, ...]
    inputs: tuple[str, ...]
    cheap: bool
    out: bool = False  # takes --out (sweep): written to a temporary folder, never ./out
    json: bool = True  # prints --json (init prints a YAML scenario)


SOURCES: dict[str, Source] = {
    "init": Source(
        ("init", "--model", "kimi-k2.6", "--hardware", "h200", "--rate", "5")
        + ("--prompt-tokens", "8192", "--output-tokens", "1024"),
        PRESETS,
        cheap=True,
        json=False,
    ),
    **{
        f"capacity-{kv}": Source(
            ("capacity", "scenarios/kimi-k2.6-decode.yaml", "--set", f"deployment.decode.kv_cache={kv}"),
            ("scenarios/kimi-k2.6-decode.yaml", *PRESETS),
            cheap=True,
        )
        for kv in ("bf16", "fp8_e4m3")
    },
    "weights": Source(
        ("sweep", "scenarios/glm-5.2-weight-formats.yaml"),
        ("scenarios/glm-5.2-weight-formats.yaml", *PRESETS),
        cheap=True,
        out=True,
    ),
    "prefill": Source(
        ("sweep", "scenarios/glm-5.2-prefill.yaml"), ("scenarios/glm-5.2-prefill.yaml", *PRESETS), cheap=True, out=True
    ),
    "kv": Source(
        ("sweep", "scenarios/kimi-k2.6-kv-formats.yaml"),
        ("scenarios/kimi-k2.6-kv-formats.yaml", *PRESETS),
        cheap=False,
        out=True,
    ),
    **{
        f"kv-sglang-{kv}": Source(
            ("run", "scenarios/kimi-k2.6-kv-formats.yaml", "--set", "profile=profiles/h200-sglang.json")
            + ("--set", f"deployment.decode.kv_cache={kv}", "--set", "traffic.concurrency=64"),
            ("scenarios/kimi-k2.6-kv-formats.yaml", "profiles/h200-sglang.json", *PRESETS),
            cheap=False,
        )
        for kv in ("bf16", "fp8_e4m3")
    },
    "plan": Source(
        ("plan", "bench/kimi-5rps.yaml", "--rate", "5", "--slo", "ttft_p95_ms=2000,tpot_p95_ms=50"),
        ("bench/kimi-5rps.yaml", *PRESETS, *CORPUS),
        cheap=False,
    ),
    "validate": Source(("validate",), (*PRESETS, *CORPUS), cheap=False),
}


def command(name: str) -> str:
    """The command as a reader types it."""
    return "phaseplan " + " ".join(SOURCES[name].args)


def inputs_sha256(name: str) -> str:
    """sha256 over the source's input files, each by its path and content, in path order."""
    h = hashlib.sha256()
    files = sorted({p for pattern in SOURCES[name].inputs for p in ROOT.glob(pattern) if p.is_file()})
    for p in files:
        h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def run_source(name: str) -> Any:
    """Run one source's command and return its answer (parsed JSON; init: its scenario as a mapping)."""
    s = SOURCES[name]
    exe = Path(sys.executable).with_name("phaseplan")
    with tempfile.TemporaryDirectory() as tmp:
        args = [str(exe), *s.args, *(["--json"] if s.json else []), *(["--out", tmp] if s.out else [])]
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    if done.returncode != 0:
        raise SystemExit(f"error: `{command(name)}` exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout) if s.json else yaml.safe_load(done.stdout)


# ---- the figures: text made from the answers, as the pages print it ------------------------------------------


def n(v: float, digits: int = 0) -> str:
    """Thousands grouped, fixed decimals."""
    return f"{v:,.{digits}f}"


def pct(v: float, digits: int = 1) -> str:
    return f"{100 * v:.{digits}f}%"


def _points(sweep: list[dict[str, Any]], field: str) -> dict[tuple[str, int], dict[str, Any]]:
    """A sweep's points by (the swept format, concurrency)."""
    return {(r["point"][field], r["point"]["traffic.concurrency"]): r["metrics"] for r in sweep if r.get("metrics")}


def _clients(pts: dict[tuple[str, int], dict[str, Any]]) -> list[int]:
    return sorted({c for _, c in pts})


def fig_init(a: dict[str, Any]) -> str:
    dep = a["init"]["deployment"]
    p, d = dep["prefill"], dep["decode"]
    return f"{p['instances']} prefill + {d['instances']} decode instances of TP{p['tp']}"


def fig_init_gpus(a: dict[str, Any]) -> str:
    dep = a["init"]["deployment"]
    return f"{sum(dep[pool]['instances'] * dep[pool]['tp'] for pool in ('prefill', 'decode'))} GPUs"


def fig_kv_tokens(a: dict[str, Any]) -> str:
    bf16, fp8 = (a[f"capacity-{k}"]["pools"]["decode"] for k in ("bf16", "fp8_e4m3"))
    return f"{n(bf16['kv_tokens'])} KV tokens with a BF16 cache, {n(fp8['kv_tokens'])} with FP8"


def _versus(sweep: list[dict[str, Any]], field: str, formats: tuple[str, str], names: tuple[str, str]) -> list[str]:
    """A sweep of two formats over clients as table rows: clients, each format's output tok/s, their ratio."""
    pts = _points(sweep, field)
    rows = []
    for c in _clients(pts):
        a, b = (pts[f, c]["output_tokens_per_s"] for f in formats)
        rows.append([str(c), n(a), n(b), f"{b / a:.2f}×"])
    head = ["clients", *(f"{x} output tok/s" for x in names), f"{names[1]} / {names[0]}"]
    return ["| " + " | ".join(head), "|---:" * len(head)] + ["| " + " | ".join(r) for r in rows]


def _with(table: list[str], head: str, cells: list[str]) -> list[str]:
    """The table with one more column."""
    rows = [r + f" | {c}" for r, c in zip(table[2:], cells, strict=True)]
    return [table[0] + f" | {head}", table[1] + "|---:", *rows]


def _md(table: list[str]) -> str:
    return "\n" + "\n".join(r + ("|" if r.startswith("|---") else " |") for r in table) + "\n"


def fig_kv_table(a: dict[str, Any]) -> str:
    field, kv = "deployment.decode.kv_cache", ("bf16", "fp8_e4m3")
    pts = _points(a["kv"], field)
    pairs = [(pts["bf16", c], pts["fp8_e4m3", c]) for c in _clients(pts)]
    table = _versus(a["kv"], field, kv, ("BF16", "FP8"))
    table = _with(table, "running (BF16 / FP8)", [f"{b['max_running']} / {f['max_running']}" for b, f in pairs])
    return _md(_with(table, "preempted (BF16 / FP8)", [f"{b['preempted']} / {f['preempted']}" for b, f in pairs]))


def fig_kv_sglang(a: dict[str, Any]) -> str:
    b, f = (a[f"kv-sglang-{k}"]["metrics"] for k in ("bf16", "fp8_e4m3"))
    return (
        f"the FP8 cache delivers {n(f['output_tokens_per_s'])} output tok/s against BF16's "
        f"{n(b['output_tokens_per_s'])} at 64 clients ({f['max_running']} and {b['max_running']} running)"
    )


def fig_weights_table(a: dict[str, Any]) -> str:
    field, w = "deployment.decode.weights", ("fp8", "int4")
    pts = _points(a["weights"], field)
    tpot = [" / ".join(n(pts[f, c]["tpot_ms"]["p50"], 1) for f in w) for c in _clients(pts)]
    return _md(_with(_versus(a["weights"], field, w, ("FP8", "INT4")), "TPOT p50 ms (FP8 / INT4)", tpot))


def fig_prefill(a: dict[str, Any]) -> str:
    by = {r["point"]["deployment.prefill.weights"]: r["metrics"] for r in a["prefill"] if r.get("metrics")}
    i, f = by["int4"]["input_tokens_per_s"], by["fp8"]["input_tokens_per_s"]
    return f"{n(i)} vs {n(f)} input tok/s ({i / f:.2f}×)"


def fig_plan_winner(a: dict[str, Any]) -> str:
    return a["plan"]["winner"]["layout"]


def fig_plan_figures(a: dict[str, Any]) -> str:
    w = a["plan"]["winner"]
    m = w["metrics"]
    return (
        f"p95 TTFT {n(m['ttft_ms']['p95'])} ms and TPOT {n(m['tpot_ms']['p95'], 1)} ms; binding: {w['binding']}; "
        f"${w['cost_per_mtok_usd']:.2f} per million output tokens at ${a['plan-price']:.2f} a GPU-hour (the "
        f"preset's illustrative price)"
    )


def fig_plan_band(a: dict[str, Any]) -> str:
    return a["plan-band"]


def fig_plan_search(a: dict[str, Any]) -> str:
    p = a["plan"]
    return (
        f"{n(p['candidates'])} candidates: {n(p['pruned'])} pruned (does not fit, or an analytic bound rules it "
        f"out), {n(p['simulated'])} simulated ({n(p['stopped_early'])} stopped early once their SLO was "
        f"certainly missed), {n(p['not_simulated'])} not needed"
    )


def fig_validation_table(a: dict[str, Any]) -> str:
    from simulator.validation.cells import KIND_TEXT, kind

    rows = [{**r, "kind": kind(r["metric"])} for r in a["validate"]["cases"]]
    head = ["figures", "cases", "sources", "in sample: median \\|error\\|", "within ±25%"]
    head += ["source left out: median \\|error\\|", "within ±25%"]
    table = ["| " + " | ".join(head), "|---" + "|---:" * (len(head) - 1)]
    kinds = [("all", rows)] + [(text, [r for r in rows if r["kind"] == k]) for k, text in KIND_TEXT.items()]
    for k, rs in kinds:
        if not rs:
            continue
        cells = [k, str(len(rs)), str(len({r["source_id"] for r in rs}))]
        for key in ("error", "loso_error"):
            errs = [abs(r[key]) for r in rs]
            cells += [pct(statistics.median(errs)), pct(sum(e <= 0.25 for e in errs) / len(errs), 0)]
        table.append("| " + " | ".join(cells))
    return _md(table)


def fig_validation_coverage(a: dict[str, Any]) -> str:
    return f"{pct(a['validate']['band_coverage'], 0)} of the held-out errors"


# docs/studies.md: the same answers in the words of that page (whole-run figures beside the window's)

PUBLISHED_KV = {"bf16": 686_000, "fp8_e4m3": 1_370_000}  # Kimi K2.6 on 8×H200, as the study's scenario cites them


def g(v: float) -> str:
    """Three significant digits below a thousand, whole numbers grouped above."""
    return n(v) if abs(v) >= 1000 else f"{v:.3g}"


def fig_studies_capacity(a: dict[str, Any]) -> str:
    pools = {k: a[f"capacity-{k}"]["pools"]["decode"] for k in PUBLISHED_KV}
    off = [pools[k]["kv_tokens"] / PUBLISHED_KV[k] - 1 for k in PUBLISHED_KV]
    words = ["under" if e < 0 else "over" for e in off]
    if words[0] == words[1]:
        side = f"{pct(abs(off[0]))} and {pct(abs(off[1]))} {words[0]}"
    else:
        side = f"{pct(abs(off[0]))} {words[0]} and {pct(abs(off[1]))} {words[1]}"
    return (
        f"{pools['bf16']['weights_gib_per_gpu']:.1f} GiB of weights per GPU and **{n(pools['bf16']['kv_tokens'])}** "
        f"KV tokens with a BF16 cache, **{n(pools['fp8_e4m3']['kv_tokens'])}** with FP8 e4m3 (flat) — {side} the "
        f"published 686K / 1.37M"
    )


def fig_studies_kv(a: dict[str, Any]) -> str:
    pts = _points(a["kv"], "deployment.decode.kv_cache")
    b, b32, f = pts["bf16", 64], pts["bf16", 32], pts["fp8_e4m3", 64]
    tok = "output_tokens_per_s"
    return (
        f"with a BF16 cache the decode instance runs at most {b['max_running']} such requests ({b['preempted']} "
        f"preemptions at concurrency 64) at {n(b[tok])} output tok/s ({n(b32[tok])} at 32); with FP8 it runs "
        f"{f['max_running']} with {f['preempted']} preemptions at {n(f[tok])} tok/s ({f[tok] / b[tok]:.2f}× "
        f"BF16's; over the whole run, first wave and drain included: BF16 {n(b32['full_run'][tok])} at 32 and "
        f"{n(b['full_run'][tok])} at 64, FP8 {n(f['full_run'][tok])} at 64, "
        f"{f['full_run'][tok] / b['full_run'][tok]:.2f}× BF16's)"
    )


def fig_studies_kv_equal(a: dict[str, Any]) -> str:
    pts = _points(a["kv"], "deployment.decode.kv_cache")
    ratios = [pts["fp8_e4m3", c]["output_tokens_per_s"] / pts["bf16", c]["output_tokens_per_s"] for c in (1, 8, 16)]
    return (
        f"TPOT p50 {pts['fp8_e4m3', 32]['tpot_ms']['p50']:.1f} vs {pts['bf16', 32]['tpot_ms']['p50']:.1f} ms at 32 "
        f"clients; {', '.join(f'{r:.3f}×' for r in ratios)} BF16's throughput at 1, 8, 16"
    )


def fig_studies_kv_sglang(a: dict[str, Any]) -> str:
    b, f = (a[f"kv-sglang-{k}"]["metrics"] for k in ("bf16", "fp8_e4m3"))
    tok = "output_tokens_per_s"
    return (
        f"the FP8 cache runs {f['max_running']} requests at once but delivers {n(f[tok])} tok/s against BF16's "
        f"{n(b[tok])} (concurrency 64, {b['max_running']} running, {b['preempted']} preemptions; whole run "
        f"{n(f['full_run'][tok])} vs {n(b['full_run'][tok])})"
    )


def fig_studies_weights(a: dict[str, Any]) -> str:
    pts = _points(a["weights"], "deployment.decode.weights")
    tok = "output_tokens_per_s"
    i1, f1, i64, f64 = pts["int4", 1], pts["fp8", 1], pts["int4", 64], pts["fp8", 64]
    return (
        f"GLM-5.2 INT4 decodes at {g(i1['tpot_ms']['p50'])} ms per token at concurrency 1 vs "
        f"{g(f1['tpot_ms']['p50'])} ms for FP8 ({g(i1[tok])} vs {g(f1[tok])} tok/s in the steady-state window, "
        f"{i1[tok] / f1[tok]:.2f}×; whole run {g(i1['full_run'][tok])} vs {g(f1['full_run'][tok])}), and at 64 "
        f"{n(i64[tok])} vs {n(f64[tok])} tok/s ({i64[tok] / f64[tok]:.2f}×; whole run {n(i64['full_run'][tok])} vs "
        f"{n(f64['full_run'][tok])})"
    )


def fig_studies_prefill(a: dict[str, Any]) -> str:
    by = {r["point"]["deployment.prefill.weights"]: r for r in a["prefill"] if r.get("metrics")}
    i, f = (by[w]["metrics"] for w in ("int4", "fp8"))
    (si, sf), tok = (by[w]["step_anatomy"]["summary"] for w in ("int4", "fp8")), "input_tokens_per_s"
    attention = by["fp8"]["step_anatomy"]["prefill"]["prefill_chunk"]["by_family"]["prefill_attention"]
    return (
        f"{n(i[tok])} vs {n(f[tok])} input tok/s (steady-state window; whole run {n(i['full_run'][tok])} vs "
        f"{n(f['full_run'][tok])}) — because its routed experts run BF16 tensor cores after dequantization while FP8 "
        f"runs FP8 tensor cores at twice the rate (attention and dense GEMMs are FP8 in both): an 8K-token chunk "
        f"spends {n(si['prefill_chunk_gemm_ms'])} ms in GEMMs with INT4 vs {n(sf['prefill_chunk_gemm_ms'])} ms with "
        f"FP8 (the `step_anatomy` of the Result shows it per op family). Of the FP8 chunk's "
        f"{n(sf['prefill_chunk_ms'])} ms, {n(attention)} ms is sparse attention"
    )


def _band(sweep: list[dict[str, Any]], want: dict[str, Any], key: str = "output_tok_s") -> str:
    """The band `phaseplan sweep` printed for a point's figure (its JSON's `bands`)."""
    for r in sweep:
        if r.get("bands") and all(r["point"].get(k) == v for k, v in want.items()):
            return r["bands"][key]
    raise SystemExit(f"error: no sweep point {want} with a band")


FORMAT_PAIRS = (("-bf16kv-", "-fp8kv-"), ("-bf16-", "-fp8-"), ("-fp8-", "-int4-"), ("-int4-", "-nvfp4-"))


def _format_pairs(validate: dict[str, Any]) -> list[tuple[str, str, float]]:
    """The corpus's pairs of runs alike but for one format (ids differing only by one of `FORMAT_PAIRS`), their
    throughput or TPOT: per pair, its id pattern, the figure and the error of the model's ratio between the two
    runs' figures with each run's source held out (their leave-one-source-out predictions)."""
    cases = {c["id"]: c for c in validate["cases"] if "tok_s" in c["metric"] or "tpot" in c["metric"]}
    out = []
    for a, b in FORMAT_PAIRS:
        for i, c in sorted(cases.items()):
            other = cases.get(i.replace(a, b)) if a in i else None
            if other is None:
                continue
            held = [x["published"] * (1 + x["loso_error"]) for x in (c, other)]
            error = (held[1] / held[0]) / (other["published"] / c["published"]) - 1
            what = "TPOT" if "tpot" in c["metric"] else "throughput"
            out.append((i.replace(a, f"-{{{a.strip('-')},{b.strip('-')}}}-"), what, error))
    return out


def fig_studies_bands(a: dict[str, Any]) -> str:
    kv, w, p = a["kv"], a["weights"], a["prefill"]
    c, fmt, cache = "traffic.concurrency", "deployment.decode.weights", "deployment.decode.kv_cache"
    pairs = _format_pairs(a["validate"])
    said = "; ".join(f"{what} {e:+.0%} ({i})" for i, what, e in pairs)
    int4 = any("{fp8,int4}" in i for i, _, _ in pairs)
    return (
        f"the KV study's throughput at 64 clients carries {_band(kv, {cache: 'bf16', c: 64})} with BF16 and "
        f"{_band(kv, {cache: 'fp8_e4m3', c: 64})} with FP8, its TPOT p95 "
        f"{_band(kv, {cache: 'fp8_e4m3', c: 64}, 'tpot_ms')}; the weight study's throughput "
        f"{_band(w, {fmt: 'int4', c: 1})} at 1 client and {_band(w, {fmt: 'int4', c: 64})} at 64, "
        f"its TPOT p95 {_band(w, {fmt: 'int4', c: 1}, 'tpot_ms')} (INT4) and "
        f"{_band(w, {fmt: 'fp8', c: 1}, 'tpot_ms')} (FP8) at 1 client; the prefill study's throughput "
        f"{_band(p, {'deployment.prefill.weights': 'int4'})}. A band is one figure's error, not a comparison's. The "
        f"corpus's {len(pairs)} pairs of runs alike but for one format put the model's ratio between them, each run's "
        f"source held out, at: {said} of the published ratio"
        + ("" if int4 else "; no published pair compares INT4 with FP8 weights")
    )


FIGS: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], str]]] = {
    "init": (("init",), fig_init),
    "init.gpus": (("init",), fig_init_gpus),
    "kv.tokens": (("capacity-bf16", "capacity-fp8_e4m3"), fig_kv_tokens),
    "kv.table": (("kv",), fig_kv_table),
    "kv.sglang": (("kv-sglang-bf16", "kv-sglang-fp8_e4m3"), fig_kv_sglang),
    "weights.table": (("weights",), fig_weights_table),
    "weights.prefill": (("prefill",), fig_prefill),
    "plan.winner": (("plan",), fig_plan_winner),
    "plan.figures": (("plan",), fig_plan_figures),
    "plan.band": (("plan",), fig_plan_band),
    "plan.search": (("plan",), fig_plan_search),
    "validation.table": (("validate",), fig_validation_table),
    "validation.coverage": (("validate",), fig_validation_coverage),
    "studies.capacity": (("capacity-bf16", "capacity-fp8_e4m3"), fig_studies_capacity),
    "studies.kv": (("kv",), fig_studies_kv),
    "studies.kv.equal": (("kv",), fig_studies_kv_equal),
    "studies.kv.sglang": (("kv-sglang-bf16", "kv-sglang-fp8_e4m3"), fig_studies_kv_sglang),
    "studies.weights": (("weights",), fig_studies_weights),
    "studies.prefill": (("prefill",), fig_studies_prefill),
    "studies.bands": (("kv", "weights", "prefill", "validate"), fig_studies_bands),
}


def plan_extras(plan: dict[str, Any]) -> dict[str, Any]:
    """What `plan` prints beside its winner but not in --json (its band; the GPU-hour price its cost is at): made
    here as the command makes them, from its winner's scenario."""
    from simulator.config import loader
    from simulator.planning.search import mapping
    from simulator.results.cost import gpu_hour_usd
    from simulator.validation import bands

    _, raw = loader.load(ROOT / SOURCES["plan"].args[1], [])
    line = bands.plan_line(raw, plan)
    won = loader.validate(mapping(raw, plan["question"]["fixed"], plan["winner"]["overrides"]), "the plan's winner")
    return {"plan-band": " ".join(line.split()) if line else "no band", "plan-price": gpu_hour_usd(won)}


def figures(answers: dict[str, Any], names: list[str] | None = None) -> dict[str, str]:
    """The named figures (default all) from the sources' answers."""
    if "plan" in answers and "plan-band" not in answers:
        answers = {**answers, **plan_extras(answers["plan"])}
    out = {}
    for k, (srcs, f) in FIGS.items():
        if names is None or k in names:
            try:
                out[k] = f(answers)
            except (KeyError, TypeError, ValueError) as e:  # an answer's shape changed under the figure
                raise SystemExit(f"error: figure {k} from `{command(srcs[0])}`: {type(e).__name__}: {e}") from e
    return out


def cheap_figures() -> dict[str, str]:
    """The figures whose sources are all cheap, re-derived now (what the test runs)."""
    names = [k for k, (srcs, _) in FIGS.items() if all(SOURCES[s].cheap for s in srcs)]
    answers = {s: run_source(s) for s in {s for k in names for s in FIGS[k][0]}}
    return figures(answers, names)


# ---- the pages and figures.json -------------------------------------------------------------------------------


def pages() -> dict[str, str]:
    """The text of every page that marks figures, by its path from the repository."""
    return {page: (ROOT / page).read_text() for page in PAGES}


def marked(texts: dict[str, str]) -> dict[str, str]:
    """The figures the pages state, by name (each figure marked on one page, once)."""
    found: dict[str, str] = {}
    for page, text in texts.items():
        for m in MARK.finditer(text):
            if m["name"] in found:
                raise SystemExit(f"error: {page}: figure {m['name']} is marked twice")
            found[m["name"]] = m["body"]
    return found


def write_page(page: str, text: str, figs: dict[str, str]) -> str:
    """The page with each marked figure's text replaced by `figs`'."""
    unknown = {m["name"] for m in MARK.finditer(text)} - set(figs)
    if unknown:
        raise SystemExit(f"error: {page} marks figures no source gives: {', '.join(sorted(unknown))}")
    return MARK.sub(lambda m: f"<!-- fig:{m['name']} -->{figs[m['name']]}<!-- /fig -->", text)


def stale(record: dict[str, Any]) -> list[str]:
    """Sources whose inputs changed since figures.json was written (or that it lacks)."""
    have = record.get("sources", {})
    return [s for s in SOURCES if have.get(s, {}).get("inputs_sha256") != inputs_sha256(s)]


def check(record: dict[str, Any], texts: dict[str, str]) -> list[str]:
    """What is off, without running anything: sources whose inputs changed since figures.json was written, figures
    the pages state otherwise than figures.json (or not at all)."""
    off = [f"the inputs of `{command(s)}` changed since docs/figures.json was written" for s in stale(record)]
    written, recorded = marked(texts), record.get("figures", {})
    off += [f"figure {k} on the pages is not docs/figures.json's" for k in FIGS if written.get(k) != recorded.get(k)]
    return off


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(SOURCES), help="re-run only this source (repeatable)")
    ap.add_argument("--check", action="store_true", help="run nothing: the pages against figures.json, its hashes")
    ap.add_argument("--jobs", type=int, default=2, help="sources run at once [default: 2]")
    opts = ap.parse_args(argv)
    record = json.loads(FIGURES.read_text()) if FIGURES.is_file() else {"sources": {}, "figures": {}}
    if opts.check:
        off = check(record, pages())
        print("docs figures current" if not off else "stale:\n  " + "\n  ".join(off))
        return 1 if off else 0
    todo = opts.only or list(SOURCES)
    redo = [k for k, (srcs, _) in FIGS.items() if set(srcs) <= set(todo)]
    kept = [k for k in FIGS if k not in redo and k not in record["figures"]]
    if kept:
        raise SystemExit(f"error: docs/figures.json lacks {', '.join(kept)}: run their sources too")

    def timed(s: str) -> tuple[str, Any]:
        t = time.monotonic()
        answer = run_source(s)
        print(f"{time.monotonic() - t:7.1f} s  {command(s)}", file=sys.stderr, flush=True)
        return s, answer

    answers: dict[str, Any] = {}
    slowest_first = sorted(todo, key=lambda s: (SOURCES[s].cheap, s not in ("validate", "plan"), s != "validate"))
    with ThreadPoolExecutor(max(1, opts.jobs)) as pool:  # validate and plan overlap; the rest fills in beside them
        for s, answer in pool.map(timed, slowest_first):
            answers[s] = answer
            record["sources"][s] = {"command": command(s), "inputs_sha256": inputs_sha256(s)}
    record["figures"] = {k: v for k, v in {**record["figures"], **figures(answers, redo)}.items() if k in FIGS}
    record["sources"] = {s: record["sources"][s] for s in SOURCES if s in record["sources"]}
    FIGURES.write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    for page, text in pages().items():
        (ROOT / page).write_text(write_page(page, text, record["figures"]))
    print(f"wrote {len(record['figures'])} figures into {', '.join(PAGES)} and docs/figures.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
