"""Import AIConfigurator's measured kernel tables as a phaseplan profile (a third party's measurements, labelled so).

NVIDIA's AIConfigurator (Apache-2.0) ships kernel timings measured on real GPUs inside the serving frameworks
(SGLang, TRT-LLM, vLLM) as Parquet tables under `aiconfigurator_core/systems/data/<system>/<op>/<framework>/
<version>/`. Each table maps onto a phaseplan op family below; where the mapping is not one-to-one the profile
contract carries the measurement as it was taken (`fused_moe`: the whole routed-expert call of one layer;
`allreduce`/`allgather`: measured collectives; `gemm`: the measured (n, k) grid, read between its points by
interpolation that the run report counts as derived). Nothing is rescaled or invented here: a row's latency
(ms) becomes `median_us`; keys the tables do not measure (page size, the BF16 cache layout) are written as
`"any"`, and every other assumption is listed in the profile's `measured_by.notes`.

Families with no table (KV write, integrity check, elementwise, INT4 dense GEMM, the DSA indexer) are absent,
so the cost model prices them on the roofline and counts them, as for any profile.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator import input_files
from simulator.atomic import write_atomic
from simulator.config import safe_yaml
from simulator.config.bounds import PROFILE_US
from simulator.errors import InputError
from simulator.pricing import profile_file
from simulator.pricing.profile import NUMERIC_KEYS

TOOL = "AIConfigurator"
FRAMEWORKS = {"sglang": "SGLang", "trtllm": "TRT-LLM", "vllm": "vLLM", "nccl": "NCCL"}  # as the tool spells them
PACKAGE = "aiconfigurator-core"
ANY = "any"  # a shape key the measurement did not vary: the profile's table matches every value of it

# AIConfigurator's dtype names -> phaseplan's weight / KV formats. Only formats phaseplan models are imported:
# its `fp8` weights are 128x128 block-scaled (DeepSeek-style), so per-tensor `fp8` GEMM rows are left out.
WEIGHTS = {"bfloat16": ("bf16", 0), "fp8_block": ("fp8", 0), "int4_wo": ("int4", 32)}
KV = {"bfloat16": "bf16", "fp8": "fp8_e4m3"}
# Kernel a key is read from when a table holds several for it (the frameworks' defaults on Hopper first).
KERNEL_PREFERENCE = (
    "fa3",
    "flash_attention",
    "trtllm_mha",  # SGLang's Blackwell default for GQA attention (server_args.py), ahead of FlashInfer's
    "sglang_fused_moe_triton",
    "sglang_marlin_moe",
    "SGLang_CustomAllReduce_graph",
    "NCCL",
)
EXCLUDED_KERNELS = re.compile(r"situ_as_silu|eager")  # a stand-in epilogue; an un-graphed all-reduce
# SGLang's Triton attention backend: its rows are its own families (decode/prefill_attention_triton), never the
# engine's default kernels' (a shape only Triton measured stays on the roofline there).
TRITON = "triton"

NOTES = (
    "MLA tables are DeepSeek-shaped (qk_nope 128, rope 64, v_head 128, latent 512+64); num_heads is heads per "
    "rank; a generation row's context is isl + step.",
    "Prefill attention rows are batch 1 with no prefix (context = tokens); other prefixes stay on the roofline.",
    "Prefill attention is read from the BF16-cache rows: phaseplan's prefill op has no cache-format key.",
    "An FP8 MLA cache is SGLang's flat e4m3 latent (576 B/token); the BF16 cache's layout and every page size "
    "are not measured axes and are written as 'any'.",
    "int4_wo MoE rows (Marlin) carry no group size; they are keyed as group 32, Kimi K2's released scheme, "
    "which the 384-expert rows were collected for.",
    "Collective message_size is taken as elements of 2 bytes (bf16/half): at 512M the custom all-reduce then "
    "runs NVLink-like bus bandwidth on 8 GPUs (H200 ~470 GB/s, A100 ~222 GB/s of its 300), where bytes would give "
    "half of that.",
)
# the all-reduce is the backend's own: its name is filled in at conversion
ALLREDUCE_NOTE = (
    "The all-gather is NCCL's (collected in a TRT-LLM container); the all-reduce is {}'s custom all-reduce "
    "under CUDA graphs."
)


@dataclass(frozen=True)
class Table:
    """One Parquet table the import reads, and the columns it needs."""

    op: str  # folder under systems/data/<system>/
    file: str
    columns: tuple[str, ...]
    framework_dir: str | None = None  # None: the backend's folder; "nccl": the NCCL folder
    optional: bool = False  # MLA's: a GPU without MLA kernels (Ampere) has none, and its profile has no MLA rows
    # columns an older collection lacks, and the value it measured at (A100's attention tables predate windows)
    implied: tuple[tuple[str, Any], ...] = ()


TABLES: dict[str, Table] = {
    "gemm": Table("gemm", "gemm_perf.parquet", ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")),
    "mla_bmm": Table(
        "mla_bmm",
        "mla_bmm_perf.parquet",
        ("op_name", "kernel_source", "bmm_dtype", "num_tokens", "num_heads", "latency"),
        optional=True,
    ),
    "generation_mla": Table(
        "mla",
        "generation_mla_perf.parquet",
        ("kernel_source", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency"),
        optional=True,
    ),
    "context_mla": Table(
        "mla",
        "context_mla_perf.parquet",
        ("kernel_source", "kv_cache_dtype", "num_heads", "batch_size", "isl", "latency"),
        optional=True,
    ),
    "generation_attention": Table(
        "attention",
        "generation_attention_perf.parquet",
        (
            "kernel_source",
            "kv_cache_dtype",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "batch_size",
            "isl",
            "step",
            "window_size",
            "latency",
        ),
        implied=(("window_size", 0),),
    ),
    "context_attention": Table(
        "attention",
        "context_attention_perf.parquet",
        (
            "kernel_source",
            "kv_cache_dtype",
            "attn_dtype",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "batch_size",
            "isl",
            "window_size",
            "latency",
        ),
        implied=(("window_size", 0),),
    ),
    "moe": Table(
        "moe",
        "moe_perf.parquet",
        (
            "kernel_source",
            "moe_dtype",
            "num_tokens",
            "hidden_size",
            "inter_size",
            "topk",
            "num_experts",
            "moe_tp_size",
            "moe_ep_size",
            "distribution",
            "latency",
        ),
    ),
    "allreduce": Table(
        "comm",
        "custom_allreduce_perf.parquet",
        ("kernel_source", "allreduce_dtype", "num_gpus", "message_size", "latency"),
    ),
    "allgather": Table(
        "comm",
        "nccl_perf.parquet",
        ("op_name", "kernel_source", "nccl_dtype", "num_gpus", "message_size", "latency"),
        "nccl",
    ),
}

Row = dict[str, Any]
Entry = tuple[dict[str, Any], float]  # shape, microseconds


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


@dataclass
class Read:
    """A table as read: its rows and where they came from."""

    path: Path
    framework: str
    version: str
    rows: list[Row]
    provenance: str
    kernels: set[str] = field(default_factory=set)
    implied: dict[str, Any] = field(default_factory=dict)  # columns the table lacked, at the value they were read at


def data_root(system: str, data: Path | None) -> tuple[Path, str]:
    """The system's data folder and the tool version it belongs to (the installed package's, or a given folder)."""
    if data is not None:
        root = Path(data)
        version = "unknown (tables read from a folder)"
    else:
        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or not spec.submodule_search_locations:
            raise InputError(
                f"{PACKAGE} is not installed: pip install 'phaseplan[calibration]', or give --data "
                "PATH (a copy of its systems/data/<system> folder)"
            )
        root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data" / system
        version = importlib.metadata.version(PACKAGE)
    if not root.is_dir():
        raise InputError(f"{root}: no {TOOL} data folder for system {system!r}")
    return root, version


def _pick_version(folder: Path, wanted: str | None, what: str, file: str) -> Path:
    """The newest version folder at or below `wanted` that holds `file` (the framework's tables may come from an
    earlier release, and a newer release's folder may hold other tables only: AIConfigurator 0.12.0's B200
    sglang/0.5.16 MoE folder has a Kimi-K3 MegaMoE table and no fused-MoE one)."""
    versions = (
        sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: _version_key(p.name))
        if folder.is_dir()
        else []
    )
    if wanted is not None:
        versions = [p for p in versions if _version_key(p.name) <= _version_key(wanted)]
    if not versions:
        at = f" at or below version {wanted}" if wanted else ""
        raise InputError(f"{folder}: no {what} table{at}")
    holding = [p for p in versions if (p / file).exists()]
    return (holding or versions)[-1]  # none holds it: the newest, whose missing file the caller names


def _meta(folder: Path) -> tuple[str, str, str]:
    """framework, version and provenance (collected / legacy) from a table folder's collection_meta.yaml."""
    import yaml

    path = folder / "collection_meta.yaml"
    if not path.exists():
        return folder.parent.name, folder.name, "unknown (no collection_meta.yaml)"
    try:
        meta = safe_yaml.parse(input_files.read_text(path, input_files.AIC_META))[0] or {}
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not YAML ({getattr(e, 'problem', None) or 'unreadable'})") from None
    runtime = (meta.get("runtime") or {}) if isinstance(meta, dict) else {}
    return (
        str(runtime.get("framework", folder.parent.name)),
        str(runtime.get("version", folder.name)),
        str(meta.get("provenance", "unknown")) if isinstance(meta, dict) else "unknown",
    )


def read_table(root: Path, backend: str, version: str | None, name: str) -> Read | None:
    """Read one table's needed columns; a missing file, column or unreadable Parquet is an InputError, except an
    optional table the system lacks altogether (None)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading AIConfigurator tables needs pyarrow: pip install 'phaseplan[calibration]'") from None
    t = TABLES[name]
    framework_dir = t.framework_dir or backend
    try:
        folder = _pick_version(
            root / t.op / framework_dir, None if t.framework_dir else version, f"{t.op} {framework_dir}", t.file
        )
    except InputError:
        if t.optional:
            return None
        raise
    path = folder / t.file
    if not path.exists():
        if t.optional:
            return None
        raise InputError(f"{path}: missing {TOOL} table ({name})")
    input_files.size(path, input_files.AIC_TABLE)  # a regular file of bounded size, before pyarrow opens it
    try:
        schema = pq.read_schema(path)
        implied = {c: v for c, v in t.implied if c not in schema.names}
        missing = [c for c in t.columns if c not in schema.names and c not in implied]
        if missing:
            raise InputError(f"{path}: table lacks column(s) {', '.join(missing)}")
        rows = pq.read_table(path, columns=[c for c in t.columns if c not in implied]).to_pylist()
        rows = [{**implied, **r} for r in rows]
    except InputError:
        raise
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise InputError(f"{path}: not a readable Parquet table ({type(e).__name__})") from None
    if not rows:
        raise InputError(f"{path}: table has no rows")
    top_ms = PROFILE_US[1] / 1e3
    for i, r in enumerate(rows):
        lat = r["latency"]
        if not isinstance(lat, int | float) or isinstance(lat, bool) or not 0 <= lat <= top_ms:
            raise InputError(f"{path}: row {i} has latency {lat!r} (expected milliseconds in [0, {top_ms:.0e}])")
    framework, fw_version, provenance = _meta(folder)
    framework = FRAMEWORKS.get(framework.lower(), framework)
    return Read(path, framework, fw_version, rows, provenance, implied=implied)


def _preferred(rows: Iterable[Row], key: Callable[[Row], tuple], read: Read) -> dict[tuple, Row]:
    """One row per key: the preferred kernel where several measured it (zero latencies are dropped: unmeasured)."""
    best: dict[tuple, tuple[int, Row]] = {}
    for r in rows:
        src = r["kernel_source"]
        if EXCLUDED_KERNELS.search(src) or not r["latency"] > 0:
            continue
        rank = KERNEL_PREFERENCE.index(src) if src in KERNEL_PREFERENCE else len(KERNEL_PREFERENCE)
        k = key(r)
        if k not in best or rank < best[k][0]:
            best[k] = (rank, r)
    for _, r in best.values():
        read.kernels.add(r["kernel_source"])
    return {k: r for k, (_, r) in best.items()}


def _us(row: Row) -> float:
    return float(row["latency"]) * 1e3


# -- the mappings: one function per phaseplan family, each from the tables it names ---------------------------


def _gemm(t: dict[str, Read]) -> list[Entry]:
    g = t["gemm"]
    out = []
    rows = _preferred(
        (r for r in g.rows if r["gemm_dtype"] in WEIGHTS and r["gemm_dtype"] != "int4_wo"),
        lambda r: (r["gemm_dtype"], r["m"], r["n"], r["k"]),
        g,
    )
    for (dtype, m, n, k), r in rows.items():
        w, group = WEIGHTS[dtype]
        out.append(({"m": m, "n": n, "k": k, "batch": 1, "weights": w, "group": group}, _us(r)))
    if "mla_bmm" not in t:
        return out
    b = t["mla_bmm"]
    # MLA's absorbed per-head bmm: W_UK (q_nope 128 -> latent 512) before, W_UV (latent 512 -> v 128) after.
    nk = {"mla_gen_pre": (512, 128), "mla_gen_post": (128, 512)}
    rows = _preferred(
        (r for r in b.rows if r["bmm_dtype"] == "bfloat16" and r["op_name"] in nk),
        lambda r: (r["op_name"], r["num_tokens"], r["num_heads"]),
        b,
    )
    for (op, m, heads), r in rows.items():
        n, k = nk[op]
        out.append(({"m": m, "n": n, "k": k, "batch": heads, "weights": "bf16", "group": 0}, _us(r)))
    return out


def _decode_attention_mla(t: dict[str, Read]) -> list[Entry]:
    r_ = t["generation_mla"]
    rows = _preferred(
        (r for r in r_.rows if r["kv_cache_dtype"] in KV),
        lambda r: (r["kv_cache_dtype"], r["num_heads"], r["batch_size"], r["isl"] + r["step"]),
        r_,
    )
    out = []
    for (kv, heads, batch, ctx), r in rows.items():
        fmt = KV[kv]
        out.append(
            (
                {
                    "heads": heads,
                    "batch": batch,
                    "context": ctx,
                    "kv": fmt,
                    "layout": "flat" if fmt == "fp8_e4m3" else ANY,
                    "page_size": ANY,
                },
                _us(r),
            )
        )
    return out


def _decode_attention_gqa(t: dict[str, Read]) -> list[Entry]:
    return _generation_attention(t, triton=False)


def _decode_attention_triton(t: dict[str, Read]) -> list[Entry]:
    """SGLang's Triton split-KV decode, keyed as the Triton family (K and V of head_dim each)."""
    return [
        (
            {
                "q_heads": s["q_heads"],
                "kv_heads": s["kv_heads"],
                "k_dim": s["head_dim"],
                "v_dim": s["head_dim"],
                **{k: s[k] for k in ("batch", "context", "kv", "page_size")},
            },
            us,
        )
        for s, us in _generation_attention(t, triton=True)
    ]


def _generation_attention(t: dict[str, Read], triton: bool) -> list[Entry]:
    r_ = t["generation_attention"]
    rows = _preferred(
        (
            r
            for r in r_.rows
            if r["kv_cache_dtype"] in KV and r["window_size"] == 0 and (r["kernel_source"] == TRITON) == triton
        ),
        lambda r: (
            r["kv_cache_dtype"],
            r["num_heads"],
            r["num_key_value_heads"],
            r["head_dim"],
            r["batch_size"],
            r["isl"] + r["step"],
        ),
        r_,
    )
    return [
        (
            {"q_heads": hq, "kv_heads": hk, "head_dim": d, "batch": b, "context": c, "kv": KV[kv], "page_size": ANY},
            _us(r),
        )
        for (kv, hq, hk, d, b, c), r in rows.items()
    ]


def _prefill_attention_triton(t: dict[str, Read]) -> list[Entry]:
    """SGLang's Triton extend (prefill) kernel: the GQA context rows it measured."""
    return _context_attention(t["context_attention"], triton=True)


def _context_attention(gqa: Read, triton: bool) -> list[Entry]:
    rows = _preferred(
        (
            r
            for r in gqa.rows
            if r["kv_cache_dtype"] == "bfloat16"
            and r["attn_dtype"] == "bfloat16"
            and r["batch_size"] == 1
            and r["window_size"] == 0
            and (r["kernel_source"] == TRITON) == triton
        ),
        lambda r: (r["num_heads"], r["num_key_value_heads"], r["head_dim"], r["isl"]),
        gqa,
    )
    return [
        ({"heads": hq, "kv_heads": hk, "qk_dim": d, "v_dim": d, "tokens": isl, "context": isl, "topk": 0}, _us(r))
        for (hq, hk, d, isl), r in rows.items()
    ]


def _prefill_attention(t: dict[str, Read]) -> list[Entry]:
    gqa = t["context_attention"]
    out = []
    mla = t.get("context_mla")
    rows = (
        _preferred(
            (r for r in mla.rows if r["kv_cache_dtype"] == "bfloat16" and r["batch_size"] == 1),
            lambda r: (r["num_heads"], r["isl"]),
            mla,
        )
        if mla
        else {}
    )
    for (heads, isl), r in rows.items():
        out.append(
            (
                {
                    "heads": heads,
                    "kv_heads": heads,
                    "qk_dim": 192,
                    "v_dim": 128,
                    "tokens": isl,
                    "context": isl,
                    "topk": 0,
                },
                _us(r),
            )
        )
    return out + _context_attention(gqa, triton=False)


DEVICES = {"h200_sxm": "H200", "h100_sxm": "H100", "b200_sxm": "B200", "a100_sxm": "A100"}  # a system's GPU
MOE_DISTRIBUTIONS = ("power_law_1.01", "power_law_1.2", "balanced")  # the first: AIConfigurator's DeepSeek default


def _fused_moe(t: dict[str, Read], distribution: str) -> list[Entry]:
    r_ = t["moe"]
    rows = _preferred(
        (r for r in r_.rows if r["moe_dtype"] in WEIGHTS and r["distribution"] == distribution),
        lambda r: (
            r["moe_dtype"],
            r["num_tokens"],
            r["hidden_size"],
            r["inter_size"],
            r["topk"],
            r["num_experts"],
            r["moe_tp_size"],
            r["moe_ep_size"],
        ),
        r_,
    )
    out = []
    for (dtype, tokens, hidden, inter, topk, experts, tp, ep), r in rows.items():
        w, group = WEIGHTS[dtype]
        out.append(
            (
                {
                    "tokens": tokens,
                    "experts": experts,
                    "top_k": topk,
                    "hidden": hidden,
                    "inter": inter,
                    "tp": tp,
                    "ep": ep,
                    "weights": w,
                    "group": group,
                },
                _us(r),
            )
        )
    return out


def _collective(name: str, op_name: str | None) -> Callable[[dict[str, Read]], list[Entry]]:
    def mapping(t: dict[str, Read]) -> list[Entry]:
        r_ = t[name]
        rows = _preferred(
            (r for r in r_.rows if op_name is None or r["op_name"] == op_name),
            lambda r: (r["num_gpus"], r["message_size"]),
            r_,
        )
        return [({"bytes": size * 2, "ranks": ranks}, _us(r)) for (ranks, size), r in rows.items()]

    return mapping


OPTIONAL_FAMILIES = frozenset({"decode_attention_triton", "prefill_attention_triton"})
MAPPINGS: dict[str, tuple[tuple[str, ...], Callable[..., list[Entry]]]] = {
    "gemm": (("gemm", "mla_bmm"), _gemm),
    "decode_attention_mla": (("generation_mla",), _decode_attention_mla),
    "decode_attention_gqa": (("generation_attention",), _decode_attention_gqa),
    "prefill_attention": (("context_mla", "context_attention"), _prefill_attention),
    "decode_attention_triton": (("generation_attention",), _decode_attention_triton),
    "prefill_attention_triton": (("context_attention",), _prefill_attention_triton),
    "fused_moe": (("moe",), _fused_moe),  # also takes the routing distribution
    "allreduce": (("allreduce",), _collective("allreduce", None)),
    "allgather": (("allgather",), _collective("allgather", "all_gather")),
}


def convert(
    system: str,
    backend: str,
    version: str | None = None,
    data: Path | None = None,
    moe_distribution: str = MOE_DISTRIBUTIONS[0],
) -> dict[str, Any]:
    """The profile document converted from the tables of `system` / `backend` (all read before anything is kept).

    `moe_distribution`: which measured token-to-expert routing the fused MoE rows are read at. The default,
    power law with alpha 1.01, is what AIConfigurator's own DeepSeek-family estimates read (real routing is
    skewed: fewer distinct experts, less weight traffic than 'balanced')."""
    if moe_distribution not in MOE_DISTRIBUTIONS:
        raise InputError(f"--moe-distribution must be one of {', '.join(MOE_DISTRIBUTIONS)}, got {moe_distribution!r}")
    from simulator.calibration.modeled_profile import git_commit

    root, tool_version = data_root(system, data)
    found_reads = {name: read_table(root, backend, version, name) for name in TABLES}
    reads = {name: r for name, r in found_reads.items() if r is not None}
    absent = sorted(name for name, r in found_reads.items() if r is None)
    kernels: dict[str, list[dict[str, Any]]] = {}
    tables: dict[str, Any] = {}
    for family, (names, mapping) in MAPPINGS.items():
        if not any(n in reads for n in names):
            continue  # only an optional table can be absent: its family stays on the roofline
        found = mapping(reads, moe_distribution) if family == "fused_moe" else mapping(reads)
        entries = sorted(found, key=lambda e: json.dumps(e[0], sort_keys=True))
        if not entries and family in OPTIONAL_FAMILIES:
            continue  # the tables hold no such kernel's rows (A100's: no Triton backend measured)
        if not entries:
            raise InputError(
                f"{reads[names[0]].path}: no rows map onto phaseplan's {family} (formats "
                f"{', '.join(WEIGHTS)}; caches {', '.join(KV)})"
            )
        columns = list(entries[0][0])
        kernels[family] = {
            "columns": [*columns, "median_us"],
            "rows": [[s[c] for c in columns] + [round(us, 4)] for s, us in entries],
        }
    for name, r in reads.items():
        tables[name] = {
            "file": str(r.path.relative_to(root)),
            "framework": r.framework,
            "version": r.version,
            "collection": r.provenance,
            "rows": len(r.rows),
            "kernel_sources": sorted(r.kernels),
        }
    framework = reads["gemm"].framework
    fw_versions = sorted({r.version for n, r in reads.items() if TABLES[n].framework_dir is None}, key=_version_key)
    device = DEVICES.get(system, system)
    summary = f"measured on {device} by {TOOL} {tool_version} ({framework} {'/'.join(fw_versions)} kernels)"
    lacking = (
        [
            f"No {', '.join(absent)} table for {system} / {backend} (MLA kernels: Ampere has none): those ops stay "
            "on the roofline."
        ]
        if absent
        else []
    ) + [
        f"{name} has no {c} column (an older collection): read as {c} {v}."
        for name, r in reads.items()
        for c, v in r.implied.items()
    ]
    return {
        "device": f"NVIDIA {device}" if system in DEVICES else system,
        "source": "measured",
        "measured_by": {
            "summary": summary,
            "tool": TOOL,
            "package": PACKAGE,
            "tool_version": tool_version,
            "license": "Apache-2.0",
            "copyright": "NVIDIA CORPORATION & AFFILIATES",
            "system": system,
            "framework": framework,
            "framework_versions": fw_versions,
            "tables": tables,
            "moe_distribution": moe_distribution,
            "notes": [
                *NOTES,
                ALLREDUCE_NOTE.format(reads["allreduce"].framework),
                *lacking,
                f"fused_moe rows are the '{moe_distribution}' token-to-expert distribution (a fit prices "
                "them at it: experts touched and the busiest EP rank, simulator/pricing/expert_routing.py).",
            ],
            "derived": "gemm times between measured (n, k) points are interpolated by phaseplan when read (log time "
            "bilinear in log n, log k): derived numbers, counted in each run's provenance",
        },
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": git_commit(),
        "versions": {PACKAGE: tool_version, framework: "/".join(fw_versions)},
        "interpolate": {"gemm": ["n", "k"]},
        "kernels": kernels,
    }


def dumps(doc: dict[str, Any]) -> str:
    """JSON with one table row per line: ~140,000 measured rows stay diffable without indenting every key."""
    head = json.dumps({k: v for k, v in doc.items() if k != "kernels"}, indent=1)
    fams = ",\n".join(
        f' "{fam}": {{"columns": {json.dumps(t["columns"])}, "rows": [\n'
        + ",\n".join(json.dumps(r, separators=(",", ":")) for r in t["rows"])
        + "\n ]}"
        for fam, t in doc["kernels"].items()
    )
    return head[:-2] + ',\n "kernels": {\n' + fams + "\n }\n}\n"


def import_profile(
    system: str,
    backend: str,
    out: Path,
    version: str | None = None,
    data: Path | None = None,
    moe_distribution: str = MOE_DISTRIBUTIONS[0],
) -> dict[str, Any]:
    """Convert and write the profile (whole or not at all); returns the document."""
    doc = convert(system, backend, version, data, moe_distribution)
    # every shape and time checked as a profile's are, before anything is written
    profile_file.check(doc, f"{TOOL} tables of {system} ({backend})", NUMERIC_KEYS)
    write_atomic(Path(out), dumps(doc))
    return doc
