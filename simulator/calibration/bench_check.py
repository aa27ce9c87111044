"""A benchmark file's stated configuration against the scenario said to describe the measured deployment.

Fitting an engine to runs of another deployment would fit the wrong thing silently, so what a file states
(the model id, and where the tool records them the engine's own server arguments: SGLang's `server_info`,
vLLM's `--metadata KEY=VALUE`) must agree with the scenario; the first contradiction is one InputError naming
the file, the field and both values. What a file does not state is not checked.

Compared: the model (loosely: the preset's name as whole dash/underscore/slash-separated words of the id,
case-insensitive, or its words run together, so `deepseek-ai/DeepSeek-V3-0324` is `deepseek-v3` and
`DeepSeek-V3.2` is not); one colocated server or a PD router's prefill/decode pair against
`deployment.mode`; per pool `tp_size` (`tensor_parallel_size`, `tp`), `dp_size` when DP attention is on,
`kv_cache_dtype` (`auto` is the model's dtype: not compared), and speculative decoding on or off with its
draft steps (`speculative_num_steps`, the scenario's `draft_tokens`). A PD router's prefill and decode servers
are held against the prefill and decode pools; one server's arguments (and vLLM's metadata) against the decode
pool, the only pool a colocated scenario has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from simulator.calibration.bench_fields import short
from simulator.calibration.bench_run import BenchRun, Scalar
from simulator.config.scenario import Pool, Scenario
from simulator.errors import InputError

MODEL_FIELD = {
    "sglang": "server_info.model_path",
    "vllm": "model_id",
    "genai-perf": "input_config.model_names",
    "aiperf": "input_config.endpoint.model_names",
    "guidellm": "config.backend.model",
    "phaseplan": "model",
}
TP_KEYS = ("tp_size", "tensor_parallel_size", "tp")
KV = {"bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3"}  # anything else: itself


def check_config(runs: Iterable[BenchRun], sc: Scenario) -> None:
    for run in runs:
        _check_model(run, sc)
        _check_shape(run, sc)
        for role, args, label in _stated_args(run):
            pool, path = _pool(sc, role)
            if pool is not None:
                _check_pool(run, args, label, pool, path)


def same_model(stated: str, preset: str) -> bool:
    """Does a stated model id or path name this preset? Whole words (split on / - _ and spaces) in order,
    or the preset's words run together as one word of the id."""
    words = [w for w in re.split(r"[/\\_\s-]+", stated.lower()) if w]
    want = [w for w in re.split(r"[/\\_\s-]+", preset.lower()) if w]
    if not want:
        return False
    in_order = any(words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1))
    return in_order or "".join(want) in words


def _mismatch(run: BenchRun, field: str, stated: Scalar, path: str, expected: Scalar) -> InputError:
    return InputError(f"{run.where}: {field}: states {short(stated)}, but the scenario's {path} is {short(expected)}")


def _check_model(run: BenchRun, sc: Scenario) -> None:
    stated = run.config.model
    if stated is not None and not same_model(stated, sc.model.name):
        raise _mismatch(run, MODEL_FIELD[run.tool], stated, "model", sc.model.name)


def _check_shape(run: BenchRun, sc: Scenario) -> None:
    roles = run.config.servers
    mode = sc.deployment.mode
    if ("prefill" in roles or "decode" in roles) and mode != "disaggregated":
        raise InputError(
            f"{run.where}: server_info: a PD router's prefill and decode servers, but the scenario's "
            f"deployment.mode is {mode!r}"
        )
    server = roles.get("server", {})
    if server.get("disaggregation_mode") == "null" and mode == "disaggregated":
        raise _mismatch(run, "server_info.disaggregation_mode", "null", "deployment.mode", mode)


def _stated_args(run: BenchRun) -> list[tuple[str, dict[str, Scalar], str]]:
    """(role, arguments, field prefix): SGLang's servers, and vLLM's metadata as the one server's."""
    out: list[tuple[str, dict[str, Scalar], str]] = []
    for role, args in run.config.servers.items():
        out.append((role, args, "server_info." if role == "server" else f"server_info.{role}[0]."))
    if run.config.metadata:
        out.append(("server", dict(run.config.metadata), ""))
    return out


def _pool(sc: Scenario, role: str) -> tuple[Pool | None, str]:
    if role == "prefill":
        return sc.deployment.prefill, "deployment.prefill"
    return sc.deployment.decode, "deployment.decode"


def _whole(run: BenchRun, field: str, v: Scalar) -> int:
    """A stated count: an int, or the digits of a --metadata string."""
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    raise InputError(f"{run.where}: {field}: {short(v)} is not a whole number")


def _check_pool(run: BenchRun, args: dict[str, Scalar], label: str, pool: Pool, path: str) -> None:
    for key in TP_KEYS:
        if args.get(key) is not None:
            tp = _whole(run, label + key, args[key])
            if tp != pool.tp:
                raise _mismatch(run, label + key, tp, f"{path}.tp", pool.tp)
            break
    if args.get("enable_dp_attention") in (True, "true", "True") and args.get("dp_size") is not None:
        dp = _whole(run, label + "dp_size", args["dp_size"])
        if dp != pool.dp:
            raise _mismatch(run, label + "dp_size", dp, f"{path}.dp", pool.dp)
    kv = args.get("kv_cache_dtype")
    if isinstance(kv, str) and kv != "auto" and KV.get(kv, kv) != pool.kv_cache:
        raise _mismatch(run, label + "kv_cache_dtype", kv, f"{path}.kv_cache", pool.kv_cache)
    if "speculative_algorithm" in args:
        algo = args["speculative_algorithm"]
        on = algo not in (None, "", "None", "none")
        if on != (pool.speculative is not None):
            expected = "off" if pool.speculative is None else f"{pool.speculative.method}"
            raise _mismatch(run, label + "speculative_algorithm", algo, f"{path}.speculative", expected)
        steps = args.get("speculative_num_steps")
        if on and steps is not None and pool.speculative is not None:
            n = _whole(run, label + "speculative_num_steps", steps)
            if n != pool.speculative.draft_tokens:
                raise _mismatch(
                    run,
                    label + "speculative_num_steps",
                    n,
                    f"{path}.speculative.draft_tokens",
                    pool.speculative.draft_tokens,
                )
