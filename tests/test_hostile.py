"""Hostile and careless input (issue 12): each case is one line on stderr and exit 2 (a warning and exit 0 for
an empty run), in bounded time, and leaves nothing behind. One test per row of the issue's table, one per bound.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from phaseplan.cli import main
from simulator import budget
from simulator.config import bounds, loader, presets, safe_yaml
from simulator.errors import InputError
from simulator.workload import lengths, traces

ROOT = Path(__file__).resolve().parents[1]
FLEET = str(ROOT / "scenarios" / "fleet-disaggregated.yaml")
KV = str(ROOT / "scenarios" / "kimi-k2.6-kv-formats.yaml")
SMALL = (
    "name: small\nmodel: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 2, prompt_tokens: 64, output_tokens: 4}\n"
)


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stderr, stdout) of one in-process `phaseplan` call; also bounds its wall time."""
    monkeypatch.setattr(sys, "argv", ["phaseplan", *args])
    t0 = time.perf_counter()
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    assert time.perf_counter() - t0 < 20, "a hostile input must be refused quickly"
    cap = capsys.readouterr()
    return code, cap.err, cap.out


def refused(monkeypatch, capsys, *args: str) -> str:
    code, err, _ = cli(monkeypatch, capsys, *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def write(path: Path, text: str | bytes) -> str:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file and folder under `folder` with its content: 'exactly as it was' compares these."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + chr(ord(c) - 1)] * 9)}]\n" for c in "bcdefghi"
)


# ------------------------------------------------------------------------------------------ the table


@pytest.mark.parametrize("verb", ["capacity", "run"])
def test_billion_laughs(tmp_path, monkeypatch, capsys, verb: str) -> None:
    err = refused(monkeypatch, capsys, verb, write(tmp_path / "bomb.yaml", BOMB))
    assert "line 6: YAML over a limit: the document expands to more than 200,000 nodes" in err


def test_rate_1e12_for_60_s(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "run", FLEET, "--set", "traffic.rate=1e12", "--set", "traffic.duration_s=60")
    assert "--set traffic.rate: 1,000,000,000,000 is out of range: requests per second must lie in" in err


def test_instances_1e9(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "run", FLEET, "--set", "deployment.decode.instances=1000000000")
    assert "--set deployment.decode.instances: 1,000,000,000 is out of range" in err


def test_requests_1e9(monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "run", KV, "--set", "traffic.requests=1000000000")
    assert "traffic.requests: about 1,000,000,000 requests, over the limit of 1,000,000 per run" in err


def test_sweep_of_a_million_points(tmp_path, monkeypatch, capsys) -> None:
    sweep = "".join(
        f"  {p}: [{', '.join(str(i + 1) for i in range(10))}]\n"
        for p in [
            "seed",
            "traffic.concurrency",
            "traffic.requests",
            "deployment.decode.max_running",
            "deployment.decode.page_size",
            "slo.ttft_p95_ms",
        ]
    )
    path = write(tmp_path / "s.yaml", SMALL + "sweep:\n" + sweep)
    err = refused(monkeypatch, capsys, "sweep", path, "--out", str(tmp_path / "out"))
    assert "sweep: 10 × 10 × 10 × 10 × 10 × 10 = 1,000,000 points, over the limit of 1,000" in err
    assert not (tmp_path / "out").exists()


def test_binary_file(tmp_path, monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "b.yaml", b"name: x\n\xc0\xff\x00binary"))
    assert "line 2: scenario file is not UTF-8 text (byte 0xc0 at offset 8)" in err


def test_deep_nesting(tmp_path, monkeypatch, capsys) -> None:
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "d.yaml", "[" * 100_000))
    assert "nesting deeper than 64 levels" in err


@pytest.mark.parametrize(
    ("verb", "override", "expect"),
    [
        ("capacity", "hardware.hbm_gib=.inf", "--set hardware.hbm_gib: Input should be a finite number"),
        ("run", "traffic.duration_s=.inf", "--set traffic.duration_s: Input should be a finite number"),
        ("run", "traffic.burst_cv=1e300", "--set traffic.burst_cv: 1e+300 is out of range"),
        (
            "run",
            "traffic.prompt_tokens={dist: lognormal, median: 100, sigma: 1000}",
            "--set traffic.prompt_tokens.sigma: 1,000 is out of range",
        ),
        ("run", "traffic.sessions.think_time_s=.inf", "--set traffic.sessions.think_time_s: Input should be a finite"),
        (
            "run",
            "deployment.transfer.latency_ms=.inf",
            "--set deployment.transfer.latency_ms: Input should be a finite",
        ),
        ("capacity", "deployment.decode.reserve_gib=.inf", "--set deployment.decode.reserve_gib: Input should be a"),
        (
            "run",
            "deployment.transfer.bandwidth_gbs=1e-300",
            "--set deployment.transfer.bandwidth_gbs: 1e-300 is out of",
        ),
        ("run", "traffic.rate=.nan", "--set traffic.rate: Input should be a finite number"),
        ("run", "traffic.rate=-.inf", "--set traffic.rate: Input should be a finite number"),
    ],
)
def test_non_finite_and_absurd_numbers(monkeypatch, capsys, verb: str, override: str, expect: str) -> None:
    assert expect in refused(monkeypatch, capsys, verb, FLEET, "--set", override, "--json")


def test_duplicate_keys(tmp_path, monkeypatch, capsys) -> None:
    path = write(tmp_path / "d.yaml", "model: llama-3.1-70b\ndeployment:\n  decode:\n    tp: 8\n    tp: 2\n")
    assert "line 5: YAML syntax error: duplicate key 'tp' (first on line 4)" in refused(
        monkeypatch, capsys, "capacity", path
    )


def test_merge_keys_are_not_duplicates() -> None:
    data, _ = loader.parse_text("base: &b {tp: 8, ep: 1}\ndecode: {<<: *b, tp: 4}\n", "t")
    assert data["decode"] == {"tp": 4, "ep": 1}


@pytest.mark.parametrize("verb", ["run", "sweep"])
def test_out_under_a_file(tmp_path, monkeypatch, capsys, verb: str) -> None:
    write(tmp_path / "afile", "")
    path = write(tmp_path / "s.yaml", SMALL)
    before = snapshot(tmp_path)
    err = refused(monkeypatch, capsys, verb, path, "--out", str(tmp_path / "afile/x"))
    assert "afile is a file, so the folder cannot be made" in err
    assert snapshot(tmp_path) == before


def test_out_in_proc(monkeypatch, capsys) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    assert "cannot write in /proc" in refused(monkeypatch, capsys, "run", FLEET, "--out", "/proc/phaseplan-out")


def test_out_where_result_json_is_a_folder(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "out" / "result.json").mkdir(parents=True)
    path = write(tmp_path / "s.yaml", SMALL)
    before = snapshot(tmp_path)
    err = refused(monkeypatch, capsys, "run", path, "--out", str(tmp_path / "out"))
    assert "result.json is a folder, where the output file goes" in err
    assert snapshot(tmp_path) == before


def test_profile_out_checked_before_work(tmp_path, monkeypatch, capsys) -> None:
    write(tmp_path / "afile", "")
    err = refused(monkeypatch, capsys, "profile", "--device", "roofline", "--out", str(tmp_path / "afile/p.json"))
    assert "exists and is not a folder" in err
    err = refused(monkeypatch, capsys, "profile", "--device", "roofline", "--out", str(tmp_path))
    assert "is a folder; name the file to write" in err


def test_profile_cuda_without_a_gpu(tmp_path, monkeypatch, capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    err = refused(monkeypatch, capsys, "profile", "--device", "cuda", "--out", str(tmp_path / "p.json"))
    assert "--device cuda: no CUDA GPU is visible here" in err
    assert list(tmp_path.iterdir()) == []


def test_prompt_over_context(monkeypatch, capsys) -> None:
    err = refused(
        monkeypatch, capsys, "run", FLEET, "--set", "model=llama-3.1-70b", "--set", "traffic.prompt_tokens=1000000"
    )
    assert "--set traffic.prompt_tokens: prompts reach 3,009,216 tokens (the last of 3 turns" in err
    assert "over llama-3.1-70b's context of 131,072" in err


def test_truncation_is_a_choice(tmp_path, monkeypatch, capsys) -> None:
    text = SMALL.replace("prompt_tokens: 64", "prompt_tokens: 200000, truncate_to_context: true")
    code, err, out = cli(monkeypatch, capsys, "run", write(tmp_path / "s.yaml", text), "--json")
    assert code == 0, err
    m = json.loads(out)["metrics"]
    # Each prompt is cut to leave room for its 4-token answer: 131,072 − 4 = 131,068 tokens.
    assert m["completed"] == 2 and m["input_tokens"] == 2 * 131_068 and m["output_tokens"] == 2 * 4


def test_answers_that_overflow_the_context_are_refused_or_cut(tmp_path, monkeypatch, capsys) -> None:
    """A prompt that fits but leaves no room for its answer: refused before the run when the lengths are bounded,
    as drawn when they are not, and cut (answer first kept, prompt trimmed) when truncation is chosen."""
    text = SMALL.replace("prompt_tokens: 64, output_tokens: 4", "prompt_tokens: 130000, output_tokens: 2000")
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "a.yaml", text))
    assert (
        "traffic.output_tokens: prompts of up to 130,000 tokens and answers of up to 2,000 reach 132,000, over "
        "llama-3.1-70b's context of 131,072; shorten them or set traffic.truncate_to_context: true"
    ) in err
    text = SMALL.replace("output_tokens: 4", "output_tokens: {dist: lognormal, median: 400000, sigma: 0.1}")
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "b.yaml", text))
    assert "traffic.prompt_tokens: request 0 (arriving at 0 s) has a 64-token prompt and a " in err
    assert "over the model's context of 131,072; set traffic.truncate_to_context: true" in err
    code, err, out = cli(
        monkeypatch,
        capsys,
        "run",
        write(tmp_path / "c.yaml", text.replace("output_tokens:", "truncate_to_context: true, output_tokens:")),
        "--json",
    )
    assert code == 0, err
    m = json.loads(out)["metrics"]
    # Answers of ~400K tokens are cut to 131,071 (context − 1), leaving the prompt 1 token of its 64.
    assert m["completed"] == 2 and m["output_tokens"] == 2 * 131_071 and m["input_tokens"] == 2 * 1


def test_lognormal_tail_over_context_is_refused_as_drawn(tmp_path, monkeypatch, capsys) -> None:
    text = SMALL.replace("prompt_tokens: 64", "prompt_tokens: {dist: lognormal, median: 100000, sigma: 2}")
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "s.yaml", text))
    assert "traffic.prompt_tokens: request" in err and "over the model's context of 131,072" in err


def test_profile_of_another_device(tmp_path, monkeypatch, capsys) -> None:
    prof = write(tmp_path / "b200.json", json.dumps({"device": "NVIDIA B200", "source": "measured", "kernels": {}}))
    path = write(tmp_path / "s.yaml", SMALL + f"profile: {prof}\n")
    err = refused(monkeypatch, capsys, "run", path)
    assert "was made on 'NVIDIA B200', but the scenario's hardware is 'h200'" in err
    assert "--allow-profile-mismatch" in err
    code, err, _ = cli(monkeypatch, capsys, "run", path, "--allow-profile-mismatch")
    assert code == 0, err


def test_tp_larger_than_a_node(monkeypatch, capsys) -> None:
    err = refused(
        monkeypatch,
        capsys,
        "capacity",
        FLEET,
        "--set",
        "model=llama-3.1-70b",
        "--set",
        "deployment.prefill.tp=16",
        "--set",
        "deployment.decode.tp=16",
    )
    assert "--set deployment.prefill.tp: 16 GPUs per instance, but h200 has 8 GPUs per node" in err


def test_nothing_arrives_is_a_warning_with_the_reason(tmp_path, monkeypatch, capsys) -> None:
    path = write(tmp_path / "s.yaml", "model: llama-3.1-70b\ntraffic: {rate: 0.001, duration_s: 1}\n")
    code, err, _ = cli(monkeypatch, capsys, "run", path)
    assert code == 0
    assert err.strip().splitlines() == [
        "warning: no request arrived: traffic.rate 0.001/s over traffic.duration_s "
        "1 s expects 0.001 arrivals, and none fell inside the duration"
    ]


def test_huge_trace_request_is_named_by_line(tmp_path, monkeypatch, capsys) -> None:
    write(
        tmp_path / "t.jsonl",
        '{"arrival": 0, "prompt_tokens": 100, "output_tokens": 1}\n'
        '{"arrival": 1, "prompt_tokens": 10000000000, "output_tokens": 10}\n',
    )
    path = write(tmp_path / "s.yaml", "model: llama-3.1-70b\ntraffic: {trace: t.jsonl}\n")
    err = refused(monkeypatch, capsys, "run", path)
    assert "t.jsonl: line 2: 'prompt_tokens' must be an integer in [1, 100,000,000], got 10000000000" in err


def test_rejected_requests_counted_by_reason(tmp_path, monkeypatch, capsys) -> None:
    """A prompt within the context but over what an empty instance's KV holds: rejected, and why."""
    write(
        tmp_path / "t.jsonl",
        '{"arrival": 0, "prompt_tokens": 100, "output_tokens": 2}\n'
        '{"arrival": 1, "prompt_tokens": 120000, "output_tokens": 2}\n',
    )
    path = write(
        tmp_path / "s.yaml",
        "model: llama-3.1-70b\ntraffic: {trace: t.jsonl}\n"
        "deployment: {decode: {mem_fraction: 0.9, reserve_gib: 108}}\n",
    )
    code, err, out = cli(monkeypatch, capsys, "run", path, "--json")
    assert code == 0, err
    m = json.loads(out)["metrics"]
    assert m["rejected"] == 1 and m["rejected_by_reason"] == {"prompt_over_prefill_kv": 1}
    assert m["completed"] == 1


def test_version(monkeypatch, capsys) -> None:
    code, _, out = cli(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("phaseplan ")


@pytest.mark.parametrize(
    ("sets", "expect"),
    [
        (["traffic.rate=abc"], "error: --set traffic.rate: Input should be a valid number"),
        (["deployment.decode.mem_fraction=[[[[1]]]]"], "error: --set deployment.decode.mem_fraction:"),
        (["traffic.rate=" + "[" * 1000], "error: --set traffic.rate: YAML over a limit: nesting deeper than 64"),
        (["a." * 40 + "b=1"], "error: --set 'a.a.a.a"),
    ],
)
def test_set_errors_name_the_set(monkeypatch, capsys, sets: list[str], expect: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    assert refused(monkeypatch, capsys, "run", FLEET, *args).startswith(expect)


# ------------------------------------------------------------------------------------------------ each bound

CLASS_AT: dict[str, tuple[tuple[str, ...], Any]] = {
    # schema class -> (path to an instance of it, the mapping to start from there)
    "HardwareSpec": (("hardware",), lambda: presets.hardware("h200")),
    "ModelSpec": (("model",), lambda: presets.model("llama-3.1-70b")),
    "GQA": (("model", "attention"), lambda: presets.model("llama-3.1-70b")["attention"]),
    "MLA": (("model", "attention"), lambda: presets.model("kimi-k2.6")["attention"]),
    "Indexer": (("model", "indexer"), lambda: presets.model("glm-5.2")["indexer"]),
    "MoE": (("model", "moe"), lambda: presets.model("kimi-k2.6")["moe"]),
    "Pool": (("deployment", "decode"), lambda: {}),
    "Transfer": (("deployment", "transfer"), lambda: {}),
    "Diurnal": (("traffic", "diurnal"), lambda: {}),
    "Sessions": (("traffic", "sessions"), lambda: {}),
    "Agentic": (("traffic", "agentic"), lambda: {}),
    "StorageTier": (("deployment", "decode", "storage_tier"), lambda: {"capacity_gib": 1, "bandwidth_gbs": 1}),
    "Retries": (("traffic", "retries"), lambda: {}),
    "Routing": (("routing",), lambda: {}),
    "ScorerWeights": (("routing", "weights"), lambda: {}),
    "SLO": (("slo",), lambda: {}),
    "Cost": (("cost",), lambda: {}),
    "BenchRandom": (("traffic", "bench_random"), lambda: {"input_len": 100, "output_len": 10}),
    "FormatRule": (("model", "formats", "int4"), lambda: {"components": ["attention"]}),
    "RooflineFit": (("hardware", "roofline"), lambda: {"source": "t", "factors": {}}),
    "Speculative": (("deployment", "decode", "speculative"), lambda: {"method": "mtp", "acceptance": 1.5}),
    "Integrity": (("integrity",), lambda: {}),
    "EngineSpec": (("engine",), lambda: presets.engine("sglang-0.5")),
}
# (class, field)s whose schema type already stops a value past the bound's top (≤ 1, a validator of its own)
SCHEMA_FIRST = {
    ("BenchRandom", "range_ratio"),  # a share: ≤ 1 in the schema
    ("Pool", "tp"),
    ("Pool", "ep"),
    ("Pool", "nodes"),
    ("Pool", "dp"),  # these first fail to divide the heads or tp
    ("Pool", "mem_fraction"),
    ("GQA", "partial_rotary_factor"),
    ("Integrity", "fault_rate"),
    ("Speculative", "acceptance"),  # a mean accepted length lies in [1, draft_tokens + 1]
    ("Pool", "tbo_hidden_share"),  # a share: ≤ 1 in the schema
    ("EngineSpec", "tbo_hidden_share"),
}
LENGTH_BASE = {
    "value": {"dist": "fixed"},
    "low": {"dist": "uniform"},
    "high": {"dist": "uniform", "low": 1},
    "median": {"dist": "lognormal"},
    "max": {"dist": "lognormal", "median": 10},
    "sigma": {"dist": "lognormal", "median": 10},
}


def bad_scenario(cls: str, field: str, value: Any) -> tuple[dict[str, Any], str]:
    """A scenario whose only fault is `value` at (cls, field), and the dotted path the error must name."""
    model = {"MLA": "kimi-k2.6", "MoE": "kimi-k2.6", "Indexer": "glm-5.2", "Speculative": "deepseek-v3"}.get(
        cls, "llama-3.1-70b"
    )
    data: dict[str, Any] = {"model": presets.model(model), "traffic": {"concurrency": 1, "requests": 1}}
    if cls == "Scenario":
        data[field] = value
        return data, field
    if cls == "Length":
        data["traffic"]["prompt_tokens"] = {**LENGTH_BASE[field], field: value}
        if field == "low":
            data["traffic"]["prompt_tokens"]["high"] = value
        return data, f"traffic.prompt_tokens.{field}"
    if cls == "Traffic":
        data["traffic"] = {"rate": 1.0, "duration_s": 1.0} if field in ("rate", "duration_s") else {"concurrency": 1}
        data["traffic"][field] = value
        return data, f"traffic.{field}"
    if cls.startswith("Calibration"):  # a fitted engine's record: in a list (files) and maps (terms, error)
        data["engine"] = calibrated_engine()
        cal = data["engine"]["calibration"]
        node, at = {
            "Calibration": (cal, "engine.calibration"),
            "CalibrationFile": (cal["files"][0], "engine.calibration.files.0"),
            "CalibrationTerm": (cal["terms"]["host_step_us"], "engine.calibration.terms.host_step_us"),
            "CalibrationError": (cal["error"]["latency"], "engine.calibration.error.latency"),
        }[cls]
        node[field] = value
        return data, f"{at}.{field}"
    path, base = CLASS_AT[cls]
    if cls == "RooflineFit":
        data["hardware"] = presets.hardware("h200")
    if cls == "Pool" and field in ("redundant_experts", "expert_imbalance"):  # expert fields need an MoE over EP
        data["model"], base = presets.model("kimi-k2.6"), lambda: {"ep": 8, "redundant_experts": 8}  # EPLB
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if field == "factors":  # a mapping of factor names to numbers
        node[path[-1]] = {**base(), field: {"mem_eff_gemm": value}}
        return data, ".".join(path) + ".factors.mem_eff_gemm"
    node[path[-1]] = {**(node.get(path[-1]) or base()), field: [value] if field == "multipliers" else value}
    return data, ".".join(path) + f".{field}" + (".0" if field == "multipliers" else "")


def calibrated_engine() -> dict[str, Any]:
    """The sglang-0.5 preset as `phaseplan calibrate` would write it, fitted to one run."""
    return {
        **presets.engine("sglang-0.5"),
        "calibration": {
            "base": "sglang-0.5",
            "deployment": "d.yaml",
            "files": [{"path": "f.json", "sha256": "0" * 64, "tool": "sglang", "runs": 1}],
            "runs": 1,
            "terms": {"host_step_us": {"before": 1.0, "after": 2.0, "informed": True}},
            "error": {"latency": {"median": 0.1, "max": 0.2, "cases": 1, "leave_one_out": False}},
        },
    }


def too_big(hi: float) -> float:
    return int(hi) * 2 if float(hi).is_integer() else hi * 10


@pytest.mark.parametrize(("cls", "field"), sorted(bounds.BOUNDS))
def test_each_bound(cls: str, field: str) -> None:
    lo, hi, _ = bounds.BOUNDS[(cls, field)]
    data, dotted = bad_scenario(cls, field, too_big(hi))
    with pytest.raises(InputError) as e:
        loader.validate(data, "t.yaml")
    msg = str(e.value)
    assert f"t.yaml: {dotted}: " in msg, msg
    if (cls, field) not in SCHEMA_FIRST:
        assert "out of range" in msg and "must lie in" in msg
    if lo > 0 and not float(lo).is_integer():  # a positive float with a floor above zero: below it fails too
        data, dotted = bad_scenario(cls, field, lo / 10)
        with pytest.raises(InputError, match="out of range"):
            loader.validate(data, "t.yaml")


def test_every_number_of_the_schema_has_a_bound() -> None:
    """Each int or float field of every schema class has its own physical range in bounds.BOUNDS (a count such
    as speculative.draft_tokens once had none: 10^4 draft tokens never finished)."""
    import typing

    from pydantic import BaseModel

    from simulator.config.scenario import Scenario

    seen: set[type] = set()
    unbounded = []

    def walk(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for name, f in cls.model_fields.items():
            kinds = {a for t in (f.annotation, *typing.get_args(f.annotation)) for a in (t, *typing.get_args(t))}
            # a seed is any int; a focus value is one of the sweep's, each bounded as its point's scenario
            if kinds & {int, float} and (cls.__name__, name) not in bounds.BOUNDS and name not in ("seed", "focus"):
                unbounded.append(f"{cls.__name__}.{name}")
            for k in kinds:
                if isinstance(k, type) and issubclass(k, BaseModel):
                    walk(k)

    walk(Scenario)
    assert unbounded == []


def test_unlisted_numbers_have_the_default_bound(monkeypatch) -> None:
    monkeypatch.delitem(bounds.BOUNDS, ("MLA", "kv_lora_rank"))
    data, _ = bad_scenario("MLA", "kv_lora_rank", 10**16)
    with pytest.raises(
        InputError,
        match=r"t.yaml: model.attention.kv_lora_rank: 1.00e\+16 is out of range: any "
        r"number must lie in \[-1,000,000,000,000,000, 1,000,000,000,000,000\]",
    ):
        loader.validate(data, "t.yaml")
    data["model"]["attention"]["kv_lora_rank"] = 512
    loader.validate(data, "t.yaml")


def test_profile_size_is_bounded(tmp_path, monkeypatch) -> None:
    from simulator import input_files
    from simulator.pricing import profile

    write(tmp_path / "p.json", json.dumps({"device": "h200", "source": "modeled", "kernels": {}}))
    monkeypatch.setattr(input_files, "PROFILE", input_files.Kind("profile", 10))
    with pytest.raises(InputError, match="p.json: profile is 54 bytes, over the 10 bytes a profile may have"):
        profile.Profile.load(tmp_path / "p.json")


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("a: " + "x" * (safe_yaml.MAX_BYTES + 10), "larger than 1024 KiB"),
        ("a: " + "[" * (safe_yaml.MAX_DEPTH + 1) + "]" * (safe_yaml.MAX_DEPTH + 1), "nesting deeper than 64"),
        ("a: [" + ", ".join(["1"] * (safe_yaml.MAX_NODES + 1)) + "]", "expands to more than 200,000 nodes"),
        ("a: &a [*a]\n", "recursive alias"),
        ("a: 1" + "0" * 5000 + "\n", "integer too long"),
        ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ],
)
def test_yaml_limits(text: str, expect: str) -> None:
    with pytest.raises(InputError, match=expect):
        loader.load_text(text, "upload.yaml")


def test_load_text_is_the_file_loader() -> None:
    """The app's upload path: the same parse, limits and checks as a file, named as the caller says."""
    text = Path(FLEET).read_text()
    sc, raw = loader.load_text(text, "upload.yaml", ["traffic.rate=2"])
    assert sc.traffic.rate == 2 and raw["traffic"]["rate"] == 2
    assert sc == loader.load(FLEET, ["traffic.rate=2"])[0]
    with pytest.raises(InputError, match="^upload.yaml: line 6: YAML over a limit"):
        loader.load_text(BOMB, "upload.yaml")


# ---------------------------------------------------------------------------------- the work budget's bounds


def sc_of(text: str, *sets: str) -> Any:
    return loader.load_text(text, "t.yaml", sets)[0]


def test_budget_requests_and_the_override() -> None:
    sc = sc_of(SMALL, "traffic.requests=16")
    with pytest.raises(InputError, match="traffic.requests: about 16 requests, over the limit of 10 per run"):
        budget.check(sc, limits=budget.Limits().with_max_requests(10))
    assert budget.check(sc).requests == 16
    big = sc_of(SMALL, "traffic.requests=2000000")
    with pytest.raises(InputError, match="about 2,000,000 requests, over the limit of 1,000,000"):
        budget.check(big)
    assert budget.check(big, limits=budget.Limits.none()).requests == 2e6


def test_budget_open_loop_rate_times_duration() -> None:
    sc = sc_of("model: llama-3.1-70b\ntraffic: {rate: 1000, duration_s: 3600, sessions: {turns: 2}}\n")
    with pytest.raises(InputError, match=r"traffic.rate × traffic.duration_s: about 7,200,000 requests"):
        budget.check(sc)


def test_budget_closed_loop_by_duration() -> None:
    """Clients for a duration: at most one request per output token's step each (a step is at least a kernel per
    layer), so a day of 100,000 clients is refused."""
    sc = sc_of("model: llama-3.1-70b\ntraffic: {concurrency: 100000, duration_s: 86400, output_tokens: 100}\n")
    with pytest.raises(InputError, match="traffic.concurrency × traffic.duration_s: about"):
        budget.check(sc)


def test_budget_output_tokens() -> None:
    sc = sc_of(
        SMALL,
        "traffic.requests=1000",
        "traffic.output_tokens=2000000",
        "model=glm-5.2",
        "traffic.truncate_to_context=true",
    )
    with pytest.raises(InputError, match="traffic.output_tokens: about 2,000,000,000 output tokens"):
        budget.check(sc)


def test_budget_memory() -> None:
    sc = sc_of(SMALL, "deployment.decode.instances=4096", "hardware.hbm_gib=4000")
    with pytest.raises(InputError, match=r"deployment.decode.instances: the run would hold about [\d,.]+ GiB"):
        budget.check(sc)


def test_budget_trace_rows_and_file_size(tmp_path, monkeypatch) -> None:
    write(tmp_path / "t.jsonl", '{"arrival": 0, "prompt_tokens": 10, "output_tokens": 1}\n' * 30)
    sc = sc_of("model: llama-3.1-70b\ntraffic: {trace: t.jsonl}\n")
    assert budget.estimate(sc, tmp_path).requests == 30  # the rows, read and checked before the run
    with pytest.raises(InputError, match=r"traffic.trace \(t.jsonl\): about 30 requests"):
        budget.check(sc, tmp_path, budget.Limits().with_max_requests(20))
    from simulator import input_files

    monkeypatch.setattr(input_files, "TRACE", input_files.Kind("trace", 100, 100, 100))
    with pytest.raises(InputError, match="t.jsonl: trace is 1.6 KiB, over the 100 bytes a trace may have"):
        budget.check(sc, tmp_path)


def test_budget_sweep_points_and_total(tmp_path, monkeypatch, capsys) -> None:
    sweep = SMALL + "sweep:\n  seed: [" + ", ".join(map(str, range(1001))) + "]\n"
    with pytest.raises(InputError, match="sweep: 1001 = 1,001 points, over the limit of 1,000"):
        budget.check_points(sc_of(sweep))
    ests = [budget.Estimate(1e6, 0, 0, "traffic.requests")] * 5
    with pytest.raises(InputError, match="sweep: about 5,000,000 requests over 5 runs"):
        budget.check_sweep_total(ests)
    path = write(tmp_path / "s.yaml", SMALL + "sweep:\n  traffic.requests: [1, 20]\n")
    err = refused(monkeypatch, capsys, "sweep", path, "--max-requests", "10", "--out", str(tmp_path / "o"))
    assert err.startswith("error: sweep point traffic.requests=20: traffic.requests: about 20 requests")


def test_trace_and_length_file_bounds(tmp_path) -> None:
    write(tmp_path / "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1000000000,1\n")
    with pytest.raises(InputError, match=r"a.csv: line 2: expected TIMESTAMP \(YYYY-MM-DD hh:mm:ss\[.fffffff\]\),Co"):
        traces.read_azure(tmp_path / "a.csv")
    write(tmp_path / "l.txt", "5\n1000000000\n")
    with pytest.raises(InputError, match=r"l.txt: line 2: expected an integer length in \[1, 100,000,000\]"):
        lengths.read_lengths(tmp_path / "l.txt")
    write(tmp_path / "bin.txt", b"\xff\xfe")
    with pytest.raises(InputError, match=r"bin.txt: line 1: length file is not UTF-8 text \(byte 0xff at column 1\)"):
        lengths.read_lengths(tmp_path / "bin.txt")


def test_a_set_into_a_preset_leaves_the_preset_alone() -> None:
    """Found by the fuzz test: `--set model.attention.heads=…` used to change the cached preset itself, so every
    later load in the process (a sweep's next point, the app's next what-if) saw the changed model."""
    with pytest.raises(InputError, match="model.attention.heads"):
        sc_of(SMALL, "model.attention.heads=abc")
    assert sc_of(SMALL).model.attention.heads == 64


def test_deep_or_binary_trace_and_profile_files(tmp_path, monkeypatch, capsys) -> None:
    write(tmp_path / "t.jsonl", '{"arrival": ' + "[" * 100_000 + "\n")
    path = write(tmp_path / "s.yaml", "model: llama-3.1-70b\ntraffic: {trace: t.jsonl, trace_format: phaseplan}\n")
    assert "t.jsonl: line 1: JSON nested too deeply" in refused(monkeypatch, capsys, "run", path)
    for name, content in (("deep.json", "[" * 100_000), ("bin.json", b"\xff\xfe\x00")):
        prof = write(tmp_path / name, content)
        err = refused(monkeypatch, capsys, "run", write(tmp_path / "p.yaml", SMALL + f"profile: {prof}\n"))
        assert name in err and ("nested too deeply" in err or "line 1: profile is not UTF-8 text" in err), err


def test_unknown_hardware_for_a_profile_names_the_option(tmp_path, monkeypatch, capsys) -> None:
    err = refused(
        monkeypatch, capsys, "profile", "--device", "roofline", "--hardware", "tpu9", "--out", str(tmp_path / "p.json")
    )
    assert err.startswith("error: --hardware tpu9: unknown hardware preset 'tpu9'")


def test_empirical_length_file_size_is_bounded(tmp_path, monkeypatch) -> None:
    from simulator import input_files

    write(tmp_path / "l.txt", "5\n" * 100)
    sc = sc_of("model: llama-3.1-70b\ntraffic: {concurrency: 1, prompt_tokens: {dist: empirical, file: l.txt}}\n")
    monkeypatch.setattr(input_files, "LENGTHS", input_files.Kind("length file", 100, 10, 10))
    with pytest.raises(InputError, match="l.txt: length file is 200 bytes, over the 100 bytes a length file may"):
        budget.check(sc, tmp_path)


def test_progress_bar_total_comes_from_the_estimate(monkeypatch) -> None:
    """A bar whatever drives the run: rate × duration has no request count, the estimate gives its total."""
    from phaseplan import cli as cli_module

    sc = sc_of("model: llama-3.1-70b\ntraffic: {rate: 10, duration_s: 600}\n")
    est = budget.check(sc)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    prog, tick = cli_module._progress(est.requests)
    assert prog is not None and prog.tasks[0].total == 6000
    tick(500)
    assert prog.tasks[0].completed == 500
    assert cli_module._progress(100)[0] is None  # a short run gets no bar


def test_control_characters_in_keys_stay_on_one_line(tmp_path, monkeypatch, capsys) -> None:
    """A quoted key may hold a newline or a terminal escape: the error shows them escaped, on one line."""
    path = write(tmp_path / "s.yaml", 'model: llama-3.1-70b\n"bad\\nkey\\u001b[31m": 1\n')
    err = refused(monkeypatch, capsys, "capacity", path)
    assert "line 2: bad\\nkey\\x1b[31m: unknown key" in err


@pytest.mark.parametrize("field", ["profile", "trace"])
def test_device_files_are_not_read_forever(tmp_path, monkeypatch, capsys, field: str) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    text = (
        SMALL + "profile: /dev/zero\n"
        if field == "profile"
        else "model: llama-3.1-70b\ntraffic: {trace: /dev/zero, trace_format: phaseplan}\n"
    )
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "s.yaml", text))
    assert "/dev/zero: " in err and "regular file" in err


@pytest.mark.parametrize("role", ["scenario", "trace", "lengths"])
def test_a_fifo_without_a_writer_is_refused_not_waited_on(tmp_path, monkeypatch, capsys, role: str) -> None:
    """Opening a FIFO nobody writes to blocks for ever: it is refused by its kind before it is opened (the CLI
    call's own time bound in `cli` would catch a hang)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if role == "scenario":
        err = refused(monkeypatch, capsys, "run", str(fifo))
        assert f"{fifo}: scenario file is not a regular file (a FIFO)" in err
        return
    traffic = (
        f"{{trace: {fifo}, trace_format: phaseplan}}"
        if role == "trace"
        else f"{{requests: 2, concurrency: 1, prompt_tokens: {{dist: empirical, file: {fifo}}}, output_tokens: 4}}"
    )
    err = refused(monkeypatch, capsys, "run", write(tmp_path / "s.yaml", f"model: llama-3.1-70b\ntraffic: {traffic}\n"))
    assert f"{fifo}: {'trace' if role == 'trace' else 'length file'} is not a regular file" in err


def test_a_file_error_caused_by_a_set_names_the_set(tmp_path, monkeypatch, capsys) -> None:
    """TP16 is fine on the file's 16-GPU nodes; a --set of the hardware breaks it: the error says which --set."""
    path = write(
        tmp_path / "s.yaml",
        "model: llama-3.1-70b\ndeployment:\n  decode: {tp: 16}\n"
        "hardware: {name: big, hbm_gib: 141, hbm_gbs: 4800, copy_gbs: 4300, "
        "bf16_tflops: 790, fp8_tflops: 1580, nvlink_gbs: 900, gpus_per_node: 16}\n",
    )
    assert cli(monkeypatch, capsys, "capacity", path)[0] == 0  # valid as written
    err = refused(monkeypatch, capsys, "capacity", path, "--set", "hardware=h200")
    assert "s.yaml: line 3: deployment.decode.tp: 16 GPUs per instance, but h200 has 8 GPUs per node" in err
    assert err.rstrip().endswith("(with --set hardware)")


def test_replay_checks_its_out_and_budget_first(tmp_path, monkeypatch, capsys) -> None:
    tiny = str(ROOT / "scenarios" / "tiny-cpu.yaml")
    write(tmp_path / "afile", "")
    err = refused(monkeypatch, capsys, "replay", tiny, "--device", "cpu", "--out", str(tmp_path / "afile/x"))
    assert "afile is a file, so the folder cannot be made" in err
    err = refused(monkeypatch, capsys, "replay", tiny, "--device", "cpu", "--set", "traffic.requests=5000000")
    assert "traffic.requests: about 5,000,000 requests, over the limit of 1,000,000" in err


def test_a_sweep_of_non_finite_values_is_refused_at_load(tmp_path, monkeypatch, capsys) -> None:
    """Found by the fuzz test: a sweep keeps a failed point with its values, and NaN is not JSON."""
    path = write(tmp_path / "s.yaml", SMALL + "sweep:\n  cost.gpu_hour_usd: [.nan, 1]\n")
    err = refused(monkeypatch, capsys, "sweep", path, "--out", str(tmp_path / "o"))
    assert "line 4: sweep.cost.gpu_hour_usd.0: nan is not a finite number" in err
    assert not (tmp_path / "o").exists()


def test_a_sweep_whose_first_point_fails_still_reports(tmp_path, monkeypatch, capsys) -> None:
    """Found by the fuzz test: the report read the first point's provenance, which a failed point has not."""
    path = write(tmp_path / "s.yaml", SMALL + "sweep:\n  deployment.decode.tp: [3, 8]\n")
    code, err, out = cli(monkeypatch, capsys, "sweep", path, "--out", str(tmp_path / "o"))
    assert code == 0 and "Traceback" not in err and "step times: MODELED" in out
    rows = (tmp_path / "o" / "s-sweep.csv").read_text().splitlines()
    assert len(rows) == 3


@pytest.mark.parametrize(
    ("device", "hardware", "same"),
    [
        ("NVIDIA H200", "h200", True),
        ("h200 (roofline model)", "h200", True),
        ("NVIDIA B200", "h200", False),
        ("b200 (roofline model)", "h200", False),
        ("x86_64", "cpu", True),
        ("AMD EPYC 7B13", "cpu", True),
        ("NVIDIA H200", "cpu", False),
        ("x86_64", "h200", False),
    ],
)
def test_profile_device_matching(device: str, hardware: str, same: bool) -> None:
    from simulator.calibration.device_match import same_device

    assert same_device(device, hardware) is same


@pytest.mark.parametrize(
    ("focus", "sweep", "says"),
    [
        ({"traffic.concurrency": 10**300}, {}, "the scenario has no sweep"),
        ({"traffic.concurrency": 7}, {"traffic.concurrency": [1, 8]}, "not one of the sweep's values"),
        ({"seed": 1}, {"traffic.concurrency": [1, 8]}, "not one of the sweep's paths"),
    ],
)
def test_a_focus_is_a_point_of_the_sweep(focus: dict, sweep: dict, says: str) -> None:
    """A focus names a sweep point, so its values are bounded as that point's scenario; without a sweep it would
    carry unchecked numbers into the app's knobs."""
    data = {**loader.read_yaml(KV)[0], "focus": focus, "sweep": sweep}
    with pytest.raises(InputError, match=f"focus: .*{says}"):
        loader.validate(data, "t.yaml")
