"""Fuzzing the files a run reads (issue 23): random profile rows and random trace rows, as the first round fuzzed
scenarios. Each example runs `phaseplan` in a child process under a 1 GiB address-space limit
(RLIMIT_AS) and a 10 s timeout, and must end in exit 0 with every number of its Result finite and non-negative,
or exit 2 with one `error:` line naming the problem (not the last-resort "needs more than this process has").
"Sane" is the bound every scenario number has (10^15): an arrival of 1e250 s made durations of 1e250 s.

The examples are few (a child costs about a second of interpreter start) and derandomized, so the test is the
same on every run and fits a CI budget; hypothesis still shrinks a failure to its smallest case.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny-cpu.yaml"
LIMIT_BYTES = 1 << 30  # the address space of each child
EXAMPLE_SECONDS = 10.0
EXAMPLES = 24  # per file kind
PROFILE = json.loads((ROOT / "profiles" / "cpu-tiny.json").read_text())
FAMILIES = sorted(PROFILE["kernels"])
LAST_RESORT = "needs more than this process has"
SANE = 1e15  # the brief's "every number finite and in a sane range": bounds.DEFAULT_LIMIT

HOSTILE: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    -1e300,
    1e-300,
    0,
    -1,
    2**63,
    2**64,
    10**30,
    "",
    "x",
    [],
    [1],
    {},
    {"a": 1},
    True,
    None,
]
number = st.one_of(st.sampled_from(HOSTILE), st.floats(allow_nan=True), st.integers(-(10**20), 10**20))


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


# The child's own peak RSS, written at exit: `ru_maxrss` of a child forked from a large pytest process counts the
# parent's pages it held before exec, so it measures pytest, not the run.
CHILD = (
    "import atexit, os\n"
    "from phaseplan.cli import main\n"
    "def hwm():\n"
    "    with open('/proc/self/status') as f, open(os.environ['PHASEPLAN_TEST_HWM'], 'w') as out:\n"
    "        out.write(next(line.split()[1] for line in f if line.startswith('VmHWM:')))\n"
    "atexit.register(hwm)\n"
    "main()\n"
)


def run_bounded(args: list[str], cwd: Path) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, seconds, peak RSS in MiB) of `phaseplan ARGS` in a bounded child."""
    hwm = cwd / "hwm"
    hwm.unlink(missing_ok=True)
    with (cwd / "stdout").open("w+b") as out, (cwd / "stderr").open("w+b") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            cwd=cwd,
            stdout=out,
            stderr=err,
            preexec_fn=_bounded,
            env={**os.environ, "PHASEPLAN_TEST_HWM": str(hwm)},
        )
        try:
            proc.wait(timeout=3 * EXAMPLE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        seconds = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        peak_kib = float(hwm.read_text()) if hwm.exists() else 0.0
        return (
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            seconds,
            peak_kib / 1024,
        )


def numbers(doc: Any) -> list[float]:
    """Every number of a Result's metrics (of a repeats document, the statistics but not the 95% intervals: a
    t-interval over 2 runs of a non-negative quantity may reach below zero)."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() if k != "ci95" for x in numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in numbers(v)]
    if isinstance(doc, int | float) and not isinstance(doc, bool):
        return [float(doc)]
    return []


def check_outcome(args: list[str], cwd: Path, stats: dict[str, Any]) -> None:
    code, out, err, seconds, peak_mb = run_bounded(args, cwd)
    lines = [line for line in err.splitlines() if line.strip()]
    stats["max_s"] = max(stats["max_s"], seconds)
    stats["outcomes"][str(code)] = stats["outcomes"].get(str(code), 0) + 1
    assert seconds < EXAMPLE_SECONDS, (args, seconds)
    assert "Traceback" not in err, (args, err[-3000:])
    if code == 2:
        stats.setdefault("errors", []).append(lines[0][:160] if lines else "")
        assert len(lines) == 1 and lines[0].startswith("error: ") and LAST_RESORT not in lines[0], (args, err)
        return
    assert code == 0, (args, code, err[-3000:])
    assert all(line.startswith("warning: ") for line in lines), (args, err)
    doc = json.loads(out)
    metrics = doc["metrics"]
    bad = [x for x in numbers(metrics) if not (math.isfinite(x) and 0 <= x <= SANE)]
    assert not bad, (args, bad[:5])
    assert peak_mb < LIMIT_BYTES / (1 << 20), (args, peak_mb)


# ------------------------------------------------------------------------------------------------ profiles

entry_change = st.tuples(
    st.sampled_from(FAMILIES),
    st.sampled_from(["first", "last", "middle"]),
    st.one_of(
        st.tuples(st.sampled_from(["median_us", "p10_us", "p90_us"]), number),
        st.tuples(st.sampled_from(["shape.batch", "shape.context", "shape.tokens", "shape.kv", "shape.heads"]), number),
        st.tuples(st.just("drop"), st.sampled_from(["median_us", "shape", "p90_us"])),
    ),
)
# What a re-measured profile could hold: every time of an entry scaled, or an axis value moved; these run.
plausible_change = st.tuples(
    st.sampled_from(FAMILIES),
    st.sampled_from(["first", "last", "middle"]),
    st.one_of(
        st.tuples(st.just("scale"), st.floats(0.01, 100)),
        st.tuples(st.sampled_from(["shape.batch", "shape.context", "shape.tokens"]), st.integers(0, 100_000)),
    ),
)


def mutated_profile(changes: list[tuple[str, str, tuple[str, Any]]]) -> dict[str, Any]:
    doc = json.loads(json.dumps(PROFILE))
    for family, where, (field, value) in changes:
        entries = doc["kernels"][family]
        e = entries[{"first": 0, "last": -1, "middle": len(entries) // 2}[where]]
        if field == "drop":
            e.pop(value, None)
        elif field == "scale":
            for key in ("median_us", "p10_us", "p90_us"):
                if key in e:
                    e[key] *= value
        elif field.startswith("shape."):
            key = field.split(".", 1)[1]
            if key in e["shape"]:
                e["shape"][key] = value
        else:
            e[field] = value
    return doc


def test_fuzz_profile_rows(tmp_path: Path) -> None:
    stats: dict[str, Any] = {"max_s": 0.0, "outcomes": {}}

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        changes=st.one_of(
            st.lists(plausible_change, min_size=1, max_size=3), st.lists(entry_change, min_size=1, max_size=3)
        ),
        repeats=st.booleans(),
    )
    @example(changes=[("decode_attention_mla", "first", ("p90_us", "slow"))], repeats=True)  # the cases
    @example(changes=[("decode_attention_mla", "first", ("median_us", -5))], repeats=False)
    @example(changes=[("decode_attention_gqa", "last", ("median_us", math.inf))], repeats=False)
    @example(changes=[("gemm", "first", ("shape.batch", [1]))], repeats=False)
    def fuzz(changes: list[Any], repeats: bool) -> None:
        (tmp_path / "p.json").write_text(json.dumps(mutated_profile(changes)))  # NaN, Infinity as JSON writes them
        args = ["run", str(TINY), "--set", f"profile={tmp_path / 'p.json'}", "--set", "traffic.requests=16", "--json"]
        if repeats:  # the repeats draw every time within its p10-p90
            args += ["--repeats", "2", "--jobs", "1"]
        check_outcome(args, tmp_path, stats)

    fuzz()
    print(
        f"profile rows: outcomes {stats['outcomes']}, slowest {stats['max_s']:.1f} s",
        *stats.get("errors", []),
        sep="\n",
    )
    assert stats["outcomes"].get("2", 0) > 0 and stats["outcomes"].get("0", 0) > 0


# -------------------------------------------------------------------------------------------------- traces

SCENARIO = (
    "name: fuzz\nmodel: llama-3.1-8b\ndeployment: {decode: {tp: 1, page_size: 16}}\n"
    "traffic: {trace: t.FORMAT, trace_format: FORMAT, requests: 24}\nseed: 0\n"
)
token = st.one_of(st.integers(0, 4096), st.sampled_from([0, 1, 10**8, 10**8 + 1, 2**63, -1, 1.5, "8", None]))
moment = st.one_of(st.floats(0, 100), number)
ids = st.lists(st.one_of(st.integers(0, 50), st.sampled_from([2**63 - 1, 2**63, 2**64, 10**25, -1, 1.0])), max_size=4)
phaseplan_row = st.fixed_dictionaries(
    {"arrival": moment, "prompt_tokens": token, "output_tokens": token},
    optional={"session": token, "turn": token, "blocks": ids, "block_tokens": token},
)
mooncake_row = st.fixed_dictionaries(
    {"timestamp": moment, "input_length": token, "output_length": token}, optional={"hash_ids": ids}
)
stamp = st.one_of(
    st.builds(
        "{:04d}-{:02d}-{:02d} {:02d}:{:02d}:{:02d}.{}".format,
        st.integers(1, 9999),
        st.integers(1, 12),
        st.integers(1, 28),
        st.integers(0, 99),
        st.integers(0, 99),
        st.integers(0, 61),
        st.integers(0, 10**9),
    ),
    st.sampled_from(["2023-11-16 18:17:03.9799600", "2023-11-16T18:17:04", "not a date", ""]),
)
azure_row = st.tuples(stamp, token, token).map(lambda r: ",".join(str(x) for x in r))


def trace_text(fmt: str, rows: list[Any]) -> str:
    if fmt == "azure":
        return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{r}\n" for r in rows)
    return "".join(json.dumps(r) + "\n" for r in rows)


# Rows a real trace could hold: these mostly run, so the serving model is fuzzed by the rows too.
plausible = {
    "phaseplan": st.fixed_dictionaries(
        {"arrival": st.floats(0, 100), "prompt_tokens": st.integers(1, 8192), "output_tokens": st.integers(0, 64)},
        optional={"session": st.integers(0, 3), "blocks": st.lists(st.integers(0, 9), max_size=2)},
    ),
    "mooncake": st.fixed_dictionaries(
        {"timestamp": st.floats(0, 1e5), "input_length": st.integers(1, 8192), "output_length": st.integers(0, 64)},
        optional={"hash_ids": st.lists(st.integers(0, 9), max_size=16)},
    ),
    "azure": st.tuples(
        st.builds(
            "2023-11-16 18:{:02d}:{:02d}.{:07d}".format,
            st.integers(0, 59),
            st.integers(0, 59),
            st.integers(0, 10**7 - 1),
        ),
        st.integers(1, 8192),
        st.integers(0, 64),
    ).map(lambda r: ",".join(str(x) for x in r)),
}


def test_fuzz_trace_rows(tmp_path: Path) -> None:
    stats: dict[str, Any] = {"max_s": 0.0, "outcomes": {}}
    hostile = {"phaseplan": phaseplan_row, "mooncake": mooncake_row, "azure": azure_row}
    rows = {
        f: st.one_of(
            st.lists(plausible[f], min_size=1, max_size=8),
            st.lists(st.one_of(plausible[f], hostile[f]), min_size=1, max_size=8),
        )
        for f in sorted(hostile)
    }

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=st.sampled_from(sorted(rows)).flatmap(lambda f: st.tuples(st.just(f), rows[f])))
    @example(
        case=(
            "phaseplan",
            [
                {"arrival": 0, "prompt_tokens": 9, "output_tokens": 1},
                {"arrival": 1e250, "prompt_tokens": 9, "output_tokens": 1},
            ],
        )
    )
    @example(case=("mooncake", [{"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [2**64, 1]}]))
    @example(case=("phaseplan", [{"arrival": 0, "prompt_tokens": 1024, "output_tokens": 1, "blocks": [2**63]}]))
    @example(case=("azure", ["2023-11-16 18:00:00,100,10", "9999-11-16 99:00:00,100,10"]))
    def fuzz(case: tuple[str, list[Any]]) -> None:
        fmt, trace_rows = case
        ext = "csv" if fmt == "azure" else "jsonl"
        (tmp_path / f"t.{ext}").write_text(trace_text(fmt, trace_rows))
        (tmp_path / "s.yaml").write_text(SCENARIO.replace("t.FORMAT", f"t.{ext}").replace("FORMAT", fmt))
        check_outcome(["run", str(tmp_path / "s.yaml"), "--json"], tmp_path, stats)

    fuzz()
    print(
        f"trace rows: outcomes {stats['outcomes']}, slowest {stats['max_s']:.1f} s", *stats.get("errors", []), sep="\n"
    )
    assert stats["outcomes"].get("2", 0) > 0 and stats["outcomes"].get("0", 0) > 0  # both kinds of answer seen
