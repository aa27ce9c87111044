"""Fuzzing the loader and the CLI (issue 12): random YAML documents, random values at every schema path (NaN,
±inf, huge, tiny, negative, wrong types), deep nesting, aliases and random `--set`s give either a valid run or
one `error:` line with exit 2 — never another exception, a traceback, a numpy warning or a half-written output.

The examples run in a child process under a 4 GB address-space limit (the acceptance check's `ulimit -v`); the
child's peak resident memory (its own high-water mark, VmHWM: the rusage figure would count the test process's
pages that the fork held before exec) must stay under MEMORY_BOUND_MB, and every example under EXAMPLE_SECONDS.
Runs take `--max-requests 64`, so a valid scenario is simulated, not refused for its size.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MEMORY_BOUND_MB = 1024  # peak RSS of the whole child: interpreter, numpy, numba, pytest and every example
EXAMPLE_SECONDS = 10.0  # the slowest example (on a loaded 2-core CI machine; typically under 2 s)
EXAMPLES = 200
CHILD = "PHASEPLAN_FUZZ_STATS"

BASE = {
    "name": "fuzz",
    "model": "llama-3.1-70b",
    "traffic": {"concurrency": 2, "requests": 3, "prompt_tokens": 128, "output_tokens": 8},
}
SPECIAL: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    -1e300,
    1e-300,
    5e-324,
    0,
    -1,
    0.5,
    1,
    3,
    64,
    2**63,
    10**30,
    -(10**30),
    "",
    "x" * 50,
    [],
    {},
    [1, 2],
    {"a": 1},
    True,
    False,
    None,
    "roofline",
    "bf16",
    "lognormal",
    "disaggregated",
]


def schema_paths() -> list[str]:
    """Every leaf of the base scenario as validated (presets expanded), plus the optional fields left None."""
    from simulator.config import loader

    def leaves(v: Any, prefix: str) -> list[str]:
        if isinstance(v, dict):
            return [p for k, x in v.items() for p in leaves(x, f"{prefix}{k}.")]
        if isinstance(v, list) and v:
            return [p for i, x in enumerate(v) for p in leaves(x, f"{prefix}{i}.")]
        return [prefix[:-1]]

    sc = loader.validate(dict(BASE), "fuzz")
    return sorted(set(leaves(sc.model_dump(mode="json"), "")) | {"traffic.rate", "traffic.duration_s", "sweep"})


def bomb(levels: int, width: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def run_cli(args: list[str]) -> tuple[int, str, float]:
    from phaseplan.cli import main

    err, out = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["phaseplan", *args]
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a NaN or overflow inside is a defect, not an answer
            try:
                main()
                code = 0
            except SystemExit as e:
                code = int(e.code or 0)
    finally:
        sys.argv = old
    return code, err.getvalue(), time.perf_counter() - t0


def check_case(tmp: Path, doc: str | bytes, verb: str, sets: list[str], stats: dict[str, Any]) -> None:
    """One example: exit 0 (outputs whole) or exit 2 with one error line (nothing written)."""
    path = tmp / "s.yaml"
    shutil.rmtree(tmp / "out", ignore_errors=True)  # what an earlier failing example left must not fail this one
    path.write_bytes(doc if isinstance(doc, bytes) else doc.encode("utf-8", "surrogatepass"))
    out = tmp / "out"
    args = [verb, str(path), *[a for s in sets for a in ("--set", s)]]
    if verb in ("run", "sweep"):
        args += ["--max-requests", "64", "--out", str(out)]
    code, err, seconds = run_cli(args)
    lines = [line for line in err.splitlines() if line.strip()]
    stats["max_s"] = max(stats["max_s"], seconds)
    stats["outcomes"][str(code)] = stats["outcomes"].get(str(code), 0) + 1
    assert seconds < EXAMPLE_SECONDS, (args, seconds)
    if code == 2 and len(stats["errors"]) < 40:
        stats["errors"].append(lines[0][:150] if lines else "")
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
        assert "this process has" not in lines[0], (args, err)  # the last resort must not be what caught it
        assert not out.exists(), args
    else:
        assert code == 0, (args, err)
        assert all(line.startswith("warning: ") for line in lines), (args, err)
        if verb == "run":
            assert json.loads((out / "result.json").read_text())["schema"]
    for p in [path, *(out.rglob("*") if out.exists() else [])][::-1]:
        p.rmdir() if p.is_dir() else p.unlink()
    if out.exists():
        out.rmdir()


def test_fuzz_examples(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The examples themselves: run only inside the bounded child that the test below starts."""
    if CHILD not in os.environ:
        pytest.skip("runs in the child process of test_fuzz_loader_and_cli_in_bounds")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from simulator.config import loader
    from simulator.config.specs import RoutingPolicy

    paths = schema_paths()
    hostile = st.one_of(
        st.sampled_from(SPECIAL),
        st.floats(),
        st.integers(-(10**20), 10**20),
        st.text(max_size=12),
        st.lists(st.integers(-5, 70), max_size=3),
    )
    plausible = st.one_of(st.integers(1, 16), st.floats(0.05, 1.0), st.sampled_from([8, 64, 0.9, True, False]))
    values = st.one_of(hostile, plausible)
    sane = {  # values a real scenario could hold: these examples mostly run, so the simulation is fuzzed too
        "traffic.concurrency": st.integers(1, 8),
        "traffic.requests": st.integers(1, 24),
        "traffic.prompt_tokens": st.integers(1, 4096),
        "traffic.output_tokens": st.integers(1, 64),
        "traffic.shared_prefix_tokens": st.integers(0, 1024),
        "traffic.sessions.turns": st.integers(1, 3),
        "deployment.decode.instances": st.integers(1, 3),
        "deployment.decode.tp": st.sampled_from([1, 2, 4, 8]),
        "deployment.decode.page_size": st.sampled_from([1, 16, 64, 256]),
        "deployment.decode.max_running": st.integers(1, 64),
        "deployment.decode.chunk_size": st.integers(1, 8192),
        "deployment.decode.max_batch_tokens": st.integers(1, 16384),
        "deployment.decode.mem_fraction": st.floats(0.3, 1.0),
        "deployment.decode.kv_cache": st.sampled_from(["bf16", "fp8_e4m3"]),
        "deployment.decode.weights": st.sampled_from(["bf16", "fp8", "int4"]),
        "integrity.fault_rate": st.floats(0, 0.05),
        "prefix_cache.enabled": st.booleans(),
        "routing.policy": st.sampled_from(list(get_args(RoutingPolicy))),
        "seed": st.integers(0, 2**32),
        "slo.ttft_p95_ms": st.floats(1, 1e4),
    }
    plausible_doc = st.lists(
        st.sampled_from(sorted(sane)).flatmap(lambda p: st.tuples(st.just(p), sane[p])), min_size=1, max_size=4
    ).map(lambda changes: (changes, False))
    structured = st.tuples(st.lists(st.tuples(st.sampled_from(paths), values), min_size=1, max_size=3), st.booleans())
    raw = st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300),
        st.integers(1, 20_000).map(lambda d: "a: " + "[" * d + "]" * d),
        st.tuples(st.integers(1, 12), st.integers(1, 12)).map(lambda lw: bomb(*lw) + yaml.safe_dump(BASE)),
        st.text(max_size=8).map(lambda k: yaml.safe_dump({**BASE, k: 1})),  # any key, control characters too
        st.sampled_from(
            [
                "seed: 1\nseed: 2\n",
                "p: &p {tp: 8}\ndeployment: {decode: *p, prefill: *p}\n",
                "x: &x [*x]\n",
                "model: !!python/object:os.system ls\n",
            ]
        ).map(lambda extra: yaml.safe_dump(BASE) + extra),
    )
    tmp = tmp_path_factory.mktemp("fuzz")
    stats: dict[str, Any] = {"max_s": 0.0, "outcomes": {}, "examples": 0, "errors": []}

    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        case=st.one_of(
            structured.map(lambda c: ("structured", c)),
            raw.map(lambda r: ("raw", r)),
            plausible_doc.map(lambda c: ("structured", c)),
            st.tuples(st.sampled_from(paths), values).map(lambda s: ("set", s)),
        ),
        verb=st.sampled_from(["capacity", "run", "run", "sweep"]),
    )
    def fuzz(case: tuple[str, Any], verb: str) -> None:
        kind, c = case
        stats["examples"] += 1
        sets: list[str] = []
        if kind == "structured":
            changes, add_sweep = c
            data = dict(BASE)
            for path, value in changes:
                with contextlib.suppress(Exception):  # a path through a non-mapping: leave that change out
                    data = loader.apply_overrides(data, {path: value})
            if add_sweep:
                data["sweep"] = {changes[0][0]: [changes[0][1], 1]}
            doc: str | bytes = yaml.safe_dump(data, allow_unicode=True)
        elif kind == "raw":
            doc = c
        else:
            path, value = c
            doc = yaml.safe_dump(BASE)
            sets = [f"{path}={json.dumps(value) if not isinstance(value, float) else repr(value)}"]
        check_case(tmp, doc, verb, sets, stats)

    # One valid run first, outside the timings: it loads numba's compiled functions, which each process does once.
    check_case(tmp, yaml.safe_dump(BASE), "run", [], {"max_s": 0.0, "outcomes": {}, "errors": []})
    fuzz()
    stats["peak_mb"] = _high_water_mb()
    Path(os.environ[CHILD]).write_text(json.dumps(stats))


def _high_water_mb() -> float | None:
    """This process's peak resident memory since its exec, from /proc (None where there is none)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return None if kib is None else kib / 1024


def test_fuzz_loader_and_cli_in_bounds(tmp_path: Path) -> None:
    stats_path = tmp_path / "stats.json"
    limit = 4_000_000_000

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", f"{__file__}::test_fuzz_examples"],
        cwd=ROOT,
        env={**os.environ, CHILD: str(stats_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=bounded,
    )
    t0 = time.monotonic()
    timer = threading.Timer(300, proc.kill)
    timer.start()
    output = proc.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not any other child's
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, output[-4000:]
    stats = json.loads(stats_path.read_text())
    peak_mb = stats["peak_mb"] if stats.get("peak_mb") is not None else usage.ru_maxrss / 1024
    print(
        f"fuzz: {stats['examples']} examples in {time.monotonic() - t0:.0f} s, slowest {stats['max_s']:.2f} s, "
        f"outcomes {stats['outcomes']}, child peak RSS {peak_mb:.0f} MB"
    )
    assert stats["examples"] >= EXAMPLES
    assert stats["outcomes"].get("0", 0) > 0 and stats["outcomes"].get("2", 0) > 0  # both kinds of answer seen
    assert stats["max_s"] < EXAMPLE_SECONDS
    assert peak_mb < MEMORY_BOUND_MB
