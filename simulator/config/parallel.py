"""Scenario fields for the deployments large MoE models run: speculative decoding, DP attention with wide EP
across nodes, and the rules that tie them to a model and a GPU (FP4 needs FP4 tensor cores).

Kept apart from `scenario.py` so the pool schema gains a few fields and one validator call, nothing more.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, field_validator, model_validator

from simulator.config import presets
from simulator.config.specs import FP4_FORMATS, HardwareSpec, ModelSpec


class Speculative(BaseModel):
    """Speculative decoding on a decode pool: each step drafts `draft_tokens` tokens per sequence, verifies
    them and the next position in one target step, and keeps the accepted ones.

    `acceptance` is either the mean accepted length (tokens a sequence gains per verify step, bonus token
    included: 1 ≤ τ ≤ k+1) or one probability per draft position: the chance that position i is accepted
    given that every position before it was (DeepSeek-V3 reports 85–90% for the second token with one MTP
    module, i.e. τ = 1.85–1.9 at k = 1).
    """

    model_config = ConfigDict(extra="forbid")

    method: Literal["mtp", "draft"] = Field(
        description="mtp: the model's own MTP layers draft; draft: a separate draft model."
    )
    draft_tokens: PositiveInt = Field(1, description="Tokens drafted per sequence and step (k).")
    acceptance: float | list[float] = Field(
        description="Mean accepted length τ (1 ≤ τ ≤ k+1) or one acceptance probability per draft position."
    )
    draft_model: ModelSpec | None = Field(
        None, description="method draft: a model preset's name, or an inline architecture."
    )

    @field_validator("draft_model", mode="before")
    @classmethod
    def _preset(cls, v: Any) -> Any:
        return presets.named(presets.model, v)

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, acc: float | list[float], info: ValidationInfo) -> float | list[float]:
        k = info.data.get("draft_tokens", 1)
        if isinstance(acc, list):
            if len(acc) != k:
                raise ValueError(f"{len(acc)} probabilities for draft_tokens {k} (one per position)")
            if any(not 0.0 <= p <= 1.0 for p in acc):
                raise ValueError(f"probabilities must lie in [0, 1] (got {acc})")
        elif not 1.0 <= acc <= k + 1:
            raise ValueError(f"a mean accepted length lies in [1, draft_tokens + 1 = {k + 1}]")
        return acc

    @model_validator(mode="after")
    def _consistent(self) -> Speculative:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("draft_model: method 'draft' needs a draft model (a preset name)")
        if self.method == "mtp" and self.draft_model is not None:
            raise ValueError("draft_model: method 'mtp' drafts with the model's own MTP layers; drop draft_model")
        return self

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence gains per verify step: 1 + Σ_i Π_{j≤i} p_j, or the mean given."""
        if not isinstance(self.acceptance, list):
            return float(self.acceptance)
        return 1.0 + sum(math.prod(self.acceptance[: i + 1]) for i in range(len(self.acceptance)))

    @property
    def position_probs(self) -> tuple[float, ...]:
        """The chance that draft position i is accepted given every one before it was. A mean accepted length τ
        is read as one rate p at every position, the one whose chain gives that mean: 1 + p + … + p^k = τ
        (found by bisection: the sum grows with p)."""
        if isinstance(self.acceptance, list):
            return tuple(self.acceptance)
        k, tau = self.draft_tokens, float(self.acceptance)
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if sum(mid**i for i in range(k + 1)) < tau:
                lo = mid
            else:
                hi = mid
        return (lo if tau < k + 1 else 1.0,) * k


# Pool fields of this module with their defaults: a pool's JSON leaves them out while they are off, so Results
# of deployments that do not use them keep their bytes.
POOL_DEFAULTS: dict[str, Any] = {
    "nodes": 1,
    "dp": 1,
    "redundant_experts": 0,
    "expert_imbalance": 1.0,
    "speculative": None,
    "two_batch_overlap": False,
    "max_preemptions": None,
}


def drop_defaults(data: dict[str, Any]) -> dict[str, Any]:
    for key, default in POOL_DEFAULTS.items():
        if key in data and data[key] == default:
            del data[key]
    return data


class Pool(Protocol):
    """The pool fields these rules read (the schema's Pool imports this module, so it is not imported here)."""

    tp: int
    ep: int
    dp: int
    nodes: int
    weights: str
    redundant_experts: int
    expert_imbalance: float
    speculative: Speculative | None
    two_batch_overlap: bool


def uses_scale_out(pool: Pool) -> bool:
    return pool.nodes > 1 or pool.dp > 1


def check_pool(model: ModelSpec, hw: HardwareSpec, pool: Pool, where: str) -> None:
    """The rules of this module for one pool; raises ValueError naming the field's path."""
    atp = pool.tp // pool.dp if pool.tp % pool.dp == 0 else 0
    if pool.weights in FP4_FORMATS and hw.fp4_tflops is None:
        raise ValueError(
            f"{where}.weights: {pool.weights} needs FP4 tensor cores; hardware '{hw.name}' has none "
            "(use fp8, int4 or w4a8, or a GPU with FP4 such as b200)"
        )
    if pool.tp % pool.nodes or (pool.nodes > 1 and pool.tp // pool.nodes > hw.gpus_per_node):  # (one node: as before)
        raise ValueError(
            f"{where}.nodes: tp {pool.tp} over {pool.nodes} node(s) does not fit "
            f"{hw.gpus_per_node} GPUs per node (tp counts the instance's GPUs)"
        )
    if not atp:
        raise ValueError(f"{where}.dp: {pool.dp} must divide tp {pool.tp} (attention TP = tp / dp)")
    if pool.nodes > 1 and atp > pool.tp // pool.nodes:
        raise ValueError(
            f"{where}.dp: attention TP tp / dp = {atp} would span nodes (TP all-reduces over the "
            f"scale-out network are not modeled): raise dp to at least {pool.nodes}"
        )
    if pool.dp > 1:
        if model.moe is None:
            raise ValueError(f"{where}.dp: DP attention is modeled with wide EP, which needs an MoE model")
        if pool.ep not in (1, pool.tp):
            raise ValueError(
                f"{where}.ep: behind DP attention the experts are spread over every rank (ep = tp = {pool.tp}, "
                "wide EP) or each split over them (ep = 1, MoE TP)"
            )
    if pool.two_batch_overlap and (pool.dp == 1 or pool.ep == 1):
        raise ValueError(
            f"{where}.two_batch_overlap: overlaps the MoE all-to-alls of DP attention with compute; needs dp > 1 "
            "and ep = tp"
        )
    if pool.redundant_experts and (model.moe is None or pool.ep == 1):
        raise ValueError(
            f"{where}.redundant_experts: replicas spread experts over EP ranks; needs an MoE model and ep > 1"
        )
    if pool.expert_imbalance != 1.0 and model.moe is None:
        raise ValueError(f"{where}.expert_imbalance: needs an MoE model")
    spec = pool.speculative
    if spec is not None:
        if where.endswith("prefill"):
            raise ValueError(f"{where}.speculative: speculation is a decode-pool setting")
        if spec.method == "mtp" and not model.mtp_layers:
            raise ValueError(
                f"{where}.speculative.method: 'mtp' needs a model with MTP layers "
                f"({model.name} has none; use method draft)"
            )
        if spec.draft_model is not None and spec.draft_model.attention.heads % atp:
            raise ValueError(
                f"{where}.speculative.draft_model: attention TP {atp} does not divide the draft's "
                f"{spec.draft_model.attention.heads} attention heads"
            )


def attention_heads_ok(model: ModelSpec, pool: Pool) -> bool:
    """Attention heads split over the attention TP group (tp / dp ranks)."""
    return model.attention.heads % (pool.tp // pool.dp) == 0
