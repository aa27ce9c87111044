"""A model spec from its Hugging Face `config.json`: `model: path/to/config.json` in a scenario, or `--model` of a
command, builds the same spec a preset would hold, read locally (`simulator.input_files`: no network).

Which keys carry what differs by family (`model_type`): experts are `n_routed_experts`, `num_experts` or
`num_local_experts`; the dense layers before the experts are `first_k_dense_replace` or Qwen's `mlp_only_layers`;
MLA is told by `kv_lora_rank`; DeepSeek Sparse Attention's indexer by `index_*`. The quantization config gives the
release's format and which layers it quantizes: each component's largest matrix is named as the checkpoint names
it and matched against the config's targets and exclusions.

A family or a layer kind the simulator cannot express (linear attention, experts every other layer) is refused in
one line naming the key; what is approximated (sliding-window layers priced as full attention) is said in the
spec's `source`.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator import input_files
from simulator.config.specs import Component
from simulator.errors import InputError

MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"})
DENSE_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
MOE_TYPES = frozenset({"qwen3_moe", "mixtral", "minimax_m2", "gpt_oss", "glm4_moe"})
KNOWN = MLA_TYPES | DENSE_TYPES | MOE_TYPES
QKV_BIAS_ALWAYS = frozenset({"qwen2"})  # Qwen2 has q/k/v biases without saying so in its config
# Qwen3 normalizes each head's queries and keys without saying so in its config (transformers' Qwen3Attention
# q_norm/k_norm); others say so with use_qk_norm, and MiniMax-M2 over all heads with qk_norm_type per_layer.
QK_NORM_ALWAYS = frozenset({"qwen3", "qwen3_moe"})
QK_NORM_TYPES = {"per_head": "per_head", "per_layer": "across_heads"}
# Families whose router is DeepSeek-V3's (sigmoid, a correction bias, top-k over groups) whether or not the config
# names n_group (transformers' DeepseekV3TopkRouter, Glm4MoeTopkRouter; Kimi K2 is DeepSeek-V3's architecture).
GROUPED_ROUTER = frozenset({"deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa"})
# How a family's checkpoint names its expert weights: mixtral-style `block_sparse_moe`, gpt-oss's fused experts.
EXPERTS = {"mixtral": "block_sparse_moe.experts.0.w2", "minimax_m2": "block_sparse_moe.experts.0.w2"}
EXPERTS_DEFAULT = "mlp.experts.0.down_proj"
GPT_OSS_EXPERTS = "mlp.experts.down_proj"
MAX_DIM = 1 << 24
MAX_REGEX_REPEATS = 2  # `.*` in a quantization pattern (the published ones have two); more could backtrack long
MAX_PATTERNS = 20_000  # a quantization config's module names and patterns (GLM-5.2's FP8 release lists ~700)


def read(path: str | Path) -> dict[str, Any]:
    """The model spec mapping (ModelSpec's fields) that the config at `path` describes."""
    text = input_files.read_text(path, input_files.MODEL_CONFIG)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {e.lineno}: model config is not JSON ({e.msg})") from None
    except RecursionError:
        raise InputError(f"{path}: model config nests too deep to be a config.json") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a model config must be a JSON object, got {type(data).__name__}")
    return build(data, str(path), _name(Path(path)), str(Path(path).resolve().parent))


def _name(path: Path) -> str:
    """The model's name: its folder's (a Hugging Face cache's `models--org--name/snapshots/<hash>` gives
    `org/name`), or the file's stem when it is not `config.json`."""
    parent = path.resolve().parent
    if path.name != "config.json":
        return path.stem
    if parent.parent.name == "snapshots" and parent.parent.parent.name.startswith("models--"):
        return parent.parent.parent.name.removeprefix("models--").replace("--", "/", 1)
    return parent.name or "model"


class _Keys:
    """A config's keys read with one error form: the file, the key, what was expected."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, *keys: str, default: int | None = None, low: int = 1) -> int:
        for key in keys:
            v = self.data.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_DIM:
                raise InputError(f"{self.where}: {key}: expected an integer in [{low}, {MAX_DIM:,}] (got {v!r:.60})")
            return v
        if default is None:
            raise InputError(f"{self.where}: model_type {self.data.get('model_type')!r}: no {' or '.join(keys)}")
        return default

    def flag(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise InputError(f"{self.where}: {key}: expected true or false (got {v!r:.60})")
        return v


def build(data: dict[str, Any], where: str, name: str, folder: str = "") -> dict[str, Any]:
    """The spec mapping from a parsed config (`where` names it in errors); a multimodal config's `text_config`."""
    notes: list[str] = []
    top = data
    if isinstance(data.get("text_config"), dict):
        data = data["text_config"]
        notes.append("its text model only (the vision tower is not counted)")
    k = _Keys(data, where)
    kind = data.get("model_type")
    if not isinstance(kind, str):
        raise InputError(f"{where}: no model_type: cannot tell which architecture the config describes")
    layer_kinds = data.get("layer_types")
    if isinstance(layer_kinds, list) and any(t not in ("full_attention", "sliding_attention") for t in layer_kinds):
        other = sorted({str(t) for t in layer_kinds} - {"full_attention", "sliding_attention"})
        raise InputError(f"{where}: layer_types {', '.join(other)[:80]}: only attention layers can be modeled")
    if kind not in KNOWN:
        raise InputError(
            f"{where}: model_type {kind!r:.60} is not one phaseplan reads (it reads {', '.join(sorted(KNOWN))})"
        )
    layers, hidden = k.int("num_hidden_layers"), k.int("hidden_size")
    spec: dict[str, Any] = {"name": name, "layers": layers, "hidden": hidden, "vocab": k.int("vocab_size")}
    spec["attention"] = _mla(k) if kind in MLA_TYPES else _gqa(k, kind, hidden)
    if k.has("index_n_heads"):
        head_dim = k.int("index_head_dim")
        spec["indexer"] = {
            "heads": k.int("index_n_heads"),
            "head_dim": head_dim,
            "topk": k.int("index_topk"),
            "share_layers": k.int("index_topk_freq", default=1),
            "key_bytes": head_dim + 4,  # an FP8 key and its FP32 scale
        }
    spec |= _ffn(k, kind, layers)
    spec["mtp_layers"] = k.int("num_nextn_predict_layers", default=0, low=0)
    spec["tie_embeddings"] = k.flag("tie_word_embeddings", True)  # transformers' default
    if k.has("max_position_embeddings"):
        spec["context_tokens"] = k.int("max_position_embeddings")
    if isinstance(layer_kinds, list) and "sliding_attention" in layer_kinds:
        window = k.int("sliding_window", default=0, low=0)
        notes.append(
            f"its {layer_kinds.count('sliding_attention')} sliding-window layers (window {window}) are priced and "
            "cached as full attention (an over-estimate of their KV cache and attention time)"
        )
    quant = top.get("quantization_config") or data.get("quantization_config")
    if quant is not None:
        fmt, rule = _quantization(quant, spec, kind, where)
        if rule["components"]:
            spec["release"], spec["formats"] = fmt, {fmt: rule}
    spec["trust_remote_code"] = isinstance(top.get("auto_map"), dict)
    spec["checkpoint"] = folder
    spec["source"] = f"read from {where} (model_type {kind})" + "".join(f"; {n}" for n in notes)
    return spec


def _mla(k: _Keys) -> dict[str, Any]:
    return {
        "type": "mla",
        "heads": k.int("num_attention_heads"),
        "q_lora_rank": k.int("q_lora_rank", default=0, low=0),
        "kv_lora_rank": k.int("kv_lora_rank"),
        "qk_rope_head_dim": k.int("qk_rope_head_dim"),
        "qk_nope_head_dim": k.int("qk_nope_head_dim"),
        "v_head_dim": k.int("v_head_dim"),
    }


def _gqa(k: _Keys, kind: str, hidden: int) -> dict[str, Any]:
    heads = k.int("num_attention_heads")
    head_dim = k.int("head_dim", default=hidden // heads)
    out: dict[str, Any] = {"type": "gqa", "heads": heads, "kv_heads": k.int("num_key_value_heads", default=heads)}
    out["head_dim"] = head_dim
    if kind in QKV_BIAS_ALWAYS or k.flag("attention_bias", False):
        out["qkv_bias"] = True
    rotary = k.data.get("partial_rotary_factor")
    if rotary is None and k.has("rotary_dim"):
        rotary = k.int("rotary_dim") / head_dim
    if rotary is not None and rotary != 1:
        if isinstance(rotary, bool) or not isinstance(rotary, int | float) or not 0 < rotary <= 1:
            raise InputError(f"{k.where}: partial_rotary_factor: expected a share in (0, 1] (got {rotary!r:.60})")
        out["partial_rotary_factor"] = rotary
    if k.flag("use_qk_norm", kind in QK_NORM_ALWAYS):
        norm = k.data.get("qk_norm_type", "per_head")
        if not isinstance(norm, str) or norm not in QK_NORM_TYPES:
            raise InputError(f"{k.where}: qk_norm_type {norm!r:.60}: expected per_head or per_layer")
        out["qk_norm"] = QK_NORM_TYPES[norm]
    return out


def _ffn(k: _Keys, kind: str, layers: int) -> dict[str, Any]:
    """Dense layers, their width and the experts; refused where the experts do not follow the dense layers."""
    if kind in DENSE_TYPES:
        return {"dense_layers": layers, "dense_intermediate": k.int("intermediate_size")}
    experts = k.int("n_routed_experts", "num_experts", "num_local_experts")
    width = k.int("moe_intermediate_size", "intermediate_size")
    dense = k.int("first_k_dense_replace", default=0, low=0)
    if k.int("moe_layer_freq", default=1) != 1 or k.int("decoder_sparse_step", default=1) != 1:
        raise InputError(f"{k.where}: experts every other layer (moe_layer_freq/decoder_sparse_step) cannot be modeled")
    only, kinds = k.data.get("mlp_only_layers") or [], k.data.get("mlp_layer_types")
    if isinstance(kinds, list):  # GLM-5's per-layer list: "dense" then "sparse"
        only = [i for i, t in enumerate(kinds) if t == "dense"]
    if only:
        if only != list(range(len(only))):
            raise InputError(f"{k.where}: mlp_only_layers: dense layers between expert layers cannot be modeled")
        dense = len(only)
    if dense > layers:
        raise InputError(f"{k.where}: first_k_dense_replace {dense} is more than the {layers} layers")
    shared = k.int("n_shared_experts", default=0, low=0)
    shared_width = k.int("shared_expert_intermediate_size", "shared_intermediate_size", default=0, low=0)
    if shared_width:
        if shared_width % width:
            raise InputError(
                f"{k.where}: a shared expert {shared_width} wide beside experts {width} wide cannot be modeled"
            )
        shared = shared_width // width
    moe = {
        "routed_experts": experts,
        "top_k": k.int("num_experts_per_tok", "experts_per_token"),
        "shared_experts": shared,
    }
    moe["intermediate"] = width
    if kind in GROUPED_ROUTER or k.has("n_group") or k.data.get("topk_method") == "noaux_tc":
        moe["grouped_router"] = True
    return {"dense_layers": dense, "dense_intermediate": k.int("intermediate_size"), "moe": moe}


def _samples(spec: dict[str, Any], kind: str) -> dict[Component, str]:
    """Each component's largest matrix, named as the checkpoint names it (what quantization patterns match)."""
    moe, layers = spec.get("moe"), spec["layers"]
    first = spec["dense_layers"]
    experts = GPT_OSS_EXPERTS if kind == "gpt_oss" else EXPERTS.get(kind, EXPERTS_DEFAULT)
    out: dict[Component, str] = {"attention": "model.layers.0.self_attn.o_proj"}
    if first:
        out["dense_ffn"] = "model.layers.0.mlp.down_proj"
    if moe:
        out["routed_experts"] = f"model.layers.{first}.{experts}"
        if moe["shared_experts"]:
            out["shared_experts"] = f"model.layers.{first}.mlp.shared_experts.down_proj"
    if spec["mtp_layers"]:
        out["mtp"] = f"model.layers.{layers}.{experts if moe else 'mlp.down_proj'}"
    return out


def _quantization(q: Any, spec: dict[str, Any], kind: str, where: str) -> tuple[str, dict[str, Any]]:
    """(format, rule) of the release: which components its quantized matrices are."""
    if not isinstance(q, dict):
        raise InputError(f"{where}: quantization_config: expected an object")
    method = q.get("quant_method")
    group: int | None = None
    targets: list[Any] = ["Linear"]
    if method == "fp8" or method == "mxfp4":
        fmt, ignore = method, q.get("modules_to_not_convert") or q.get("ignored_layers") or []
    elif method == "compressed-tensors":
        fmt, group, targets = _compressed_tensors(q, where)
        ignore = q.get("ignore") or []
    elif method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        modelopt = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A8_AWQ": "w4a8"}
        if algo not in modelopt:
            raise InputError(f"{where}: quantization_config.quant_algo {algo!r:.40}: reads {', '.join(modelopt)}")
        fmt, ignore = modelopt[algo], q.get("exclude_modules") or q.get("ignore") or []
        group = q.get("group_size") if fmt == "w4a8" else None
    elif method in ("awq", "gptq"):
        if q.get("bits", q.get("w_bit", 4)) != 4:
            raise InputError(f"{where}: quantization_config: only 4-bit {method} is modeled")
        fmt, group = "int4", q.get("group_size", q.get("q_group_size"))
        ignore = q.get("modules_to_not_convert") or []
    else:
        known = "fp8, mxfp4, compressed-tensors, modelopt, awq, gptq"
        raise InputError(
            f"{where}: quantization_config.quant_method {method!r:.40} is not one phaseplan reads ({known})"
        )
    if not isinstance(ignore, list) or not isinstance(targets, list):
        raise InputError(f"{where}: quantization_config: the modules to leave out must be a list")
    if len(ignore) + len(targets) > MAX_PATTERNS:
        raise InputError(f"{where}: quantization_config: more than {MAX_PATTERNS:,} module names and patterns")
    hit = _matcher(where)
    components = [
        c
        for c, module in _samples(spec, kind).items()
        if any(hit(t, module) for t in targets) and not any(hit(p, module) for p in ignore)
    ]
    rule: dict[str, Any] = {"components": components}
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= MAX_DIM:
            raise InputError(f"{where}: quantization_config: group_size {group!r:.40} is not a positive integer")
        rule["group_size"] = group
    return fmt, rule


def _compressed_tensors(q: dict[str, Any], where: str) -> tuple[str, int | None, list[Any]]:
    """compressed-tensors' one scheme (format, group size, targets); several different schemes are refused."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise InputError(f"{where}: quantization_config.config_groups: expected the quantization scheme")
    schemes = []
    for g in groups.values():
        w = g.get("weights") if isinstance(g, dict) else None
        if not isinstance(w, dict):
            raise InputError(f"{where}: quantization_config.config_groups: a group without weights")
        a = g.get("input_activations")
        bits, kind, size = w.get("num_bits"), w.get("type"), w.get("group_size")
        act_fp8 = isinstance(a, dict) and a.get("num_bits") == 8 and a.get("type") == "float"
        if bits == 4 and kind == "int":
            fmt = "w4a8" if act_fp8 else "int4"
        elif bits == 8 and kind == "float":
            fmt, size = "fp8", None
        elif bits == 4 and kind == "float":
            fmt, size = ("nvfp4" if size == 16 else "mxfp4"), None
        else:
            raise InputError(f"{where}: quantization_config: {bits}-bit {kind} weights are not a modeled format")
        schemes.append((fmt, size, tuple(g.get("targets") or ["Linear"])))
    if len(set(schemes)) > 1:
        raise InputError(f"{where}: quantization_config: several different schemes in one checkpoint are not modeled")
    fmt, size, targets = schemes[0]
    return fmt, size, list(targets)


def _matcher(where: str) -> Callable[[Any, str], bool]:
    """Whether a quantization pattern names a module: `re:` regular expressions (compressed-tensors), globs,
    `Linear` (every linear layer), or a module name or path prefix."""

    def hit(pattern: Any, module: str) -> bool:
        if not isinstance(pattern, str) or len(pattern) > 512:
            raise InputError(f"{where}: quantization_config: {pattern!r:.40} is not a module name or pattern")
        names = (module, f"language_model.{module}", module.replace("model.", "model.language_model.", 1))
        if pattern == "Linear":
            return True
        if pattern.startswith("re:"):
            expr = pattern[3:]
            if len(re.findall(r"[*+}]", expr)) > MAX_REGEX_REPEATS or re.search(r"\)[*+?{]", expr):
                raise InputError(f"{where}: quantization_config: pattern {pattern!r:.60} repeats too much to be read")
            try:
                compiled = re.compile(expr)
            except re.error as e:
                raise InputError(f"{where}: quantization_config: pattern {pattern!r:.60}: {e}") from None
            return any(compiled.match(n) for n in names)
        if "*" in pattern or "?" in pattern:
            if pattern.count("*") > 2 * MAX_REGEX_REPEATS:
                raise InputError(f"{where}: quantization_config: pattern {pattern!r:.60} has too many wildcards")
            return any(fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(n, pattern + ".*") for n in names)
        return any(f".{pattern}." in f".{n}." for n in names)  # the module, a path prefix or a name in it

    return hit
