"""Where a figure stands in the corpus: its kind, and its cell of GPU × engine × weights × model class × regime.

The model's error is not one number: each GPU has its own roofline, each engine its own terms, each weight format
its own kernels, MLA, GQA and sparse attention their own attention ops, and a step of one sequence is set by
launch floors and the engine's CPU time where a filled batch is set by bandwidth and FLOPs. So a published
measurement is filed under the kind of figure it is and the cell of the deployment it ran, and an answer reads the
band of its own cell (`bands`). A case and an answer are filed by the same function (`cell`) from the same facts:
the scenario (as its JSON dump), the pool measured, the most sequences a decode instance ran at once, and the
prompt tokens per output token of its traffic.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import astuple, dataclass, fields
from typing import Any, Literal

Kind = Literal["throughput", "tpot", "ttft", "e2el"]
KINDS: tuple[Kind, ...] = ("throughput", "tpot", "ttft", "e2el")
KIND_TEXT = {"throughput": "throughput", "tpot": "TPOT", "ttft": "TTFT", "e2el": "end-to-end latency"}
FEW = 4  # at most this many sequences a decode instance: the "few" regime (launch floors and CPU time rule)
PREFILL_HEAVY = 16.0  # prompt tokens per output token from which a workload is filed as prefill-heavy
REGIMES = ("speculative", "multi-node", "prefill", "few", "batched")  # first that applies
REGIME_TEXT = {
    "speculative": "under speculative decoding",
    "multi-node": "over several nodes an instance",
    "prefill": f"prefill-heavy (>= {PREFILL_HEAVY:g} prompt tokens an output token)",
    "few": f"at <= {FEW} sequences a decode instance",
    "batched": f"at > {FEW} sequences a decode instance",
}
ATTENTION_TEXT = {"gqa": "GQA", "mla": "MLA", "sparse": "sparse-attention"}


def kind(metric: str) -> Kind:
    """A metric as the kind of figure it is. TTFT is its own kind (queueing and prefill), not a TPOT (decode
    steps); a ratio of throughputs and a benchmark's duration (its work over its throughput) are throughputs."""
    if "ttft" in metric:
        return "ttft"
    if "e2el" in metric:
        return "e2el"
    if "tpot" in metric or "itl" in metric or metric == "step_ms":
        return "tpot"
    return "throughput"


@dataclass(frozen=True, order=True)
class Cell:
    """The deployment a figure comes from, as the corpus files it."""

    hardware: str
    engine: str
    weights: str
    model_class: str  # <attention>-<ffn>: gqa|mla|sparse - dense|moe
    regime: str

    def words(self, without: tuple[str, ...] = ()) -> str:
        """E.g. 'FP8 MLA MoE on sglang-0.5 at > 4 sequences a decode instance on H200' (an axis in `without`:
        left unsaid, any value; all of them: 'any deployment')."""
        if set(without) >= set(AXES):
            return "any deployment"
        attention, ffn = self.model_class.split("-")
        model = f"dense {ATTENTION_TEXT[attention]}" if ffn == "dense" else f"{ATTENTION_TEXT[attention]} MoE"
        parts = [
            (f"{self.weights.upper()} " if "weights" not in without else "")
            + (model if "model_class" not in without else "models"),
            f"on {self.engine}" if "engine" not in without else "on any engine",
            REGIME_TEXT[self.regime] if "regime" not in without else "in any regime",
            f"on {self.hardware.upper()}" if "hardware" not in without else "on any GPU",
        ]
        return " ".join(p for p in parts if p)


AXES: tuple[str, ...] = tuple(f.name for f in fields(Cell))


def model_class(model: dict[str, Any]) -> str:
    """dense or MoE, and GQA, MLA or sparse attention (an indexer picking the tokens each query reads)."""
    attention = "sparse" if model.get("indexer") else model["attention"]["type"]
    return f"{attention}-{'moe' if model.get('moe') else 'dense'}"


def regime(pool: dict[str, Any], sequences: int, prompt_per_output: float | None) -> str:
    """The first of: speculative decoding; an instance over several nodes (its collectives cross the scale-out
    network); a prefill-heavy workload; at most `FEW` sequences a decode instance; more."""
    if pool.get("speculative"):
        return "speculative"
    if pool.get("nodes", 1) > 1:
        return "multi-node"
    if prompt_per_output is not None and prompt_per_output >= PREFILL_HEAVY:
        return "prefill"
    return "few" if sequences <= FEW else "batched"


def cell(scenario: dict[str, Any], pool: str, sequences: int, prompt_per_output: float | None) -> Cell:
    """The cell of a scenario (its JSON dump) measured on `pool`: its GPU, engine, the pool's weight format, the
    model's class and the regime it ran in."""
    p = scenario["deployment"][pool]
    return Cell(
        scenario["hardware"]["name"],
        scenario["engine"]["name"],
        p.get("weights", "bf16"),
        model_class(scenario["model"]),
        regime(p, sequences, prompt_per_output),
    )


def of_answer(scenario: dict[str, Any], metrics: dict[str, Any]) -> Cell:
    """The cell of a Result's run (its scenario and metrics): the decode pool, its peak decode batch, and the
    prompt tokens it computed (those its prefix cache did not hold) per token it gave."""
    out = metrics.get("output_tokens") or 0
    computed = metrics.get("input_tokens", 0) * (1 - metrics.get("prefix_hit_rate", 0.0))
    ratio = computed / out if out else math.inf
    return cell(scenario, "decode", int(metrics["max_running"]), ratio)


def fields_of(c: Cell) -> dict[str, str]:
    return dict(zip(AXES, astuple(c), strict=True))


def coverage(rows: list[dict[str, Any]], min_sources: int) -> list[dict[str, Any]]:
    """The matrix: per cell with cases, its cases, sources and median |leave-one-source-out error|, and per kind
    the same and whether it is thin (fewer than `min_sources` sources: an answer there reads its neighbours'
    band, said as outside the validated region)."""
    out = []
    for c in sorted({Cell(*(r[a] for a in AXES)) for r in rows}):
        mine = [r for r in rows if all(r[a] == v for a, v in fields_of(c).items())]
        kinds = {
            k: {**_counts(ks), "thin": _counts(ks)["sources"] < min_sources} for k in KINDS if (ks := _of(mine, k))
        }
        out.append({**fields_of(c), **_counts(mine), "kinds": kinds})
    return out


def by_source(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source: its cases, the cells they fall in, and their median |leave-one-source-out error|."""
    out = []
    for s in sorted({r["source_id"] for r in rows}):
        mine = [r for r in rows if r["source_id"] == s]
        cells = len({tuple(r[a] for a in AXES) for r in mine})
        loso = statistics.median(abs(r["loso_error"]) for r in mine)
        out.append({"source_id": s, "cases": len(mine), "cells": cells, "median_abs_loso_error": loso})
    return out


def _of(rows: list[dict[str, Any]], k: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == k]


def _counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cases": len(rows),
        "sources": len({r["source_id"] for r in rows}),
        "median_abs_loso_error": statistics.median(abs(r["loso_error"]) for r in rows),
    }
