"""Hostile input, round two (issue 23), the files: one reader for every file the program opens (a regular file
of bounded size, streamed in lines of bounded number and length, UTF-8 errors with the line), every number in a
profile or a trace checked where it enters, and what each file holds counted in the work estimate first.

Each case is one `error:` line and exit 2 (or a clean exit 0), never a traceback; each failed before the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator import budget
from simulator.config import loader
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "scenarios" / "tiny-cpu.yaml")
KIMI = (
    "model: kimi-k2.6\nhardware: h200\ndeployment:\n  mode: disaggregated\n"
    "  prefill: {instances: 1, tp: 8, weights: int4, kv_cache: fp8_e4m3, mem_fraction: 0.81}\n"
    "  decode: {instances: 1, tp: 8, weights: int4, kv_cache: fp8_e4m3, mem_fraction: 0.81}\n"
)


def refused(monkeypatch, capsys, *args: str) -> str:
    code, out, err = invoke(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def trace_scenario(tmp_path: Path, rows: str, name: str = "t.jsonl", fmt: str = "auto") -> str:
    (tmp_path / name).write_text(rows)
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\n{KIMI}traffic: {{trace: {name}, trace_format: {fmt}}}\nseed: 0\n")
    return str(path)


# ------------------------------------------------------------------------------------------------ the reader


@pytest.mark.parametrize("device", ["/dev/urandom", "/dev/zero"])
def test_profile_fit_does_not_read_a_device(monkeypatch, capsys, device: str) -> None:
    """`profile fit --profile /dev/zero` read until the kernel killed it (23 GB)."""
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    err = refused(monkeypatch, capsys, "profile", "fit", "--profile", device, "--hardware", "h200")
    assert f"{device}: profile is not a regular file (a device)" in err


def test_every_kind_has_its_limits() -> None:
    from simulator import input_files

    for kind in input_files.KINDS:
        assert kind.max_bytes > 0 and kind.what
    with pytest.raises(InputError, match="x: trace is 2 GiB, over the 1 GiB a trace may have"):
        input_files._check_size("x", input_files.TRACE, 2 << 30)


def test_a_trace_line_longer_than_its_cap(tmp_path, monkeypatch, capsys) -> None:
    from simulator import input_files

    monkeypatch.setattr(input_files, "TRACE", input_files.Kind("trace", 1 << 20, 100, 80))
    rows = '{"arrival": 0, "prompt_tokens": 10, "output_tokens": 1}\n' + '{"arrival": 1, "x": "' + "y" * 200 + '"}\n'
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, rows))
    assert "t.jsonl: line 2: longer than 80 bytes, the most a line of a trace may hold" in err


def test_a_trace_with_more_rows_than_its_cap(tmp_path, monkeypatch, capsys) -> None:
    from simulator import input_files

    monkeypatch.setattr(input_files, "TRACE", input_files.Kind("trace", 1 << 20, 5, 1000))
    rows = '{"arrival": 0, "prompt_tokens": 10, "output_tokens": 1}\n' * 6
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, rows))
    assert "t.jsonl: more than 5 lines, the most a trace may have" in err


def test_a_trace_that_is_not_utf8_names_its_line(tmp_path, monkeypatch, capsys) -> None:
    rows = '{"arrival": 0, "prompt_tokens": 10, "output_tokens": 1}\n' * 2
    (tmp_path / "t.jsonl").write_bytes(rows.encode() + b'{"arrival": 2, "\xff": 1}\n')
    path = tmp_path / "s.yaml"
    path.write_text(f"{KIMI}traffic: {{trace: t.jsonl, trace_format: phaseplan}}\n")
    err = refused(monkeypatch, capsys, "run", str(path))
    assert "t.jsonl: line 3: trace is not UTF-8 text (byte 0xff at column 17)" in err


def test_deep_json_on_a_traces_first_line_names_the_line(tmp_path, monkeypatch, capsys) -> None:
    """The format is told from the first line: deep JSON there was a RecursionError with no line."""
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, '{"a": ' + "[" * 100_000 + "\n"))
    assert "t.jsonl: line 1: JSON nested too deeply; cannot tell the format" in err


def test_a_huge_integer_in_a_trace_is_a_line_not_a_traceback(tmp_path, monkeypatch, capsys) -> None:
    rows = '{"arrival": 0, "prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 1}\n'
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, rows, fmt="phaseplan"))
    assert "t.jsonl: line 1: not usable JSON (Exceeds the limit (4300 digits)" in err


def test_a_fifo_as_an_aiconfigurator_table_is_refused(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("pyarrow")
    from test_calibration_import import V, fixture_tables

    data = fixture_tables(tmp_path / "h200_sxm")
    table = data / "moe" / "sglang" / V / "moe_perf.parquet"
    table.unlink()
    os.mkfifo(table)
    out = tmp_path / "p.json"
    err = refused(monkeypatch, capsys, "profile", "import", "aiconfigurator", "--data", str(data), "--out", str(out))
    assert "moe_perf.parquet: AIConfigurator table is not a regular file (a FIFO)" in err and not out.exists()


# ---------------------------------------------------------------------------------- files in the estimate


def sc_of(text: str) -> object:
    return loader.load_text(text, "t.yaml")[0]


def test_a_traces_content_blocks_enter_the_memory_estimate(tmp_path, monkeypatch, capsys) -> None:
    """Ten rows of 10^8 prompt tokens in 1-token blocks: a few hundred bytes of trace, 10^9 block ids held (tens
    of GB); the estimate counted its lines only."""
    row = '{"arrival": 0, "prompt_tokens": 100000000, "output_tokens": 1, "block_tokens": 1}\n'
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, row * 10, fmt="phaseplan"))
    assert "traffic.trace (t.jsonl): the run would hold about 93.1 GiB, 93.1 GiB of it for 10 rows of t.jsonl" in err
    assert "with 1,000,000,000 content blocks, over the limit of 2 GiB" in err


def test_an_empirical_length_files_values_enter_the_estimate(tmp_path) -> None:
    """A length file's values are held (and its mean is the mean drawn): a 400 MB file took 4.7 GB unseen."""
    (tmp_path / "l.txt").write_text("1000\n3000\n" * 500)
    text = "model: llama-3.1-70b\ntraffic: {concurrency: 1, requests: 10, prompt_tokens: 64, "
    sc = sc_of(text + "output_tokens: {dist: empirical, file: l.txt}}\n")
    est = budget.estimate(sc, tmp_path)  # type: ignore[arg-type]
    assert est.output_tokens == 10 * 2000  # the file's mean, not 1
    assert est.memory_parts[("traffic.output_tokens.file", "the lengths of l.txt")] == 1000 * budget.LENGTH_BYTES


def test_a_profiles_size_enters_the_estimate(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(budget, "PROFILE_BYTES_FACTOR", 10**7)
    sc = sc_of(Path(TINY).read_text().replace("../profiles/", str(ROOT / "profiles") + "/"))
    with pytest.raises(InputError, match=r"^profile: the run would hold about [\d,.]+ GiB, [\d,.]+ GiB of it for the"):
        budget.check(sc)  # type: ignore[arg-type]


def test_a_length_file_over_its_line_cap(tmp_path, monkeypatch, capsys) -> None:
    from simulator import input_files

    monkeypatch.setattr(input_files, "LENGTHS", input_files.Kind("length file", 1 << 20, 3, 64))
    (tmp_path / "l.txt").write_text("5\n" * 4)
    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3.1-70b\ntraffic: {concurrency: 1, prompt_tokens: {dist: empirical, file: l.txt}}\n")
    err = refused(monkeypatch, capsys, "run", str(path))
    assert "l.txt: more than 3 lines, the most a length file may have" in err


# ------------------------------------------------------------------------------------ numbers in a profile


def profile_variant(tmp_path: Path, mutate, name: str = "p.json", last: bool = False) -> str:
    doc = json.loads((ROOT / "profiles" / "cpu-tiny.json").read_text())
    fam = list(doc["kernels"])[-1 if last else 0]
    mutate(doc["kernels"][fam][-1 if last else 0])
    text = json.dumps(doc).replace('"INF"', "Infinity").replace('"NAN"', "NaN")
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


@pytest.mark.parametrize(
    ("mutate", "expect", "last"),
    [
        (lambda e: e.update(p90_us="slow"), "kernels.decode_attention_mla[0].p90_us: must be a number of µs in", False),
        (lambda e: e.update(median_us=-5), "kernels.decode_attention_mla[0].median_us: must be a number of µs", False),
        (lambda e: e.update(median_us="INF"), "kernels.decode_attention_gqa[159].median_us: must be a number", True),
        (
            lambda e: e.update(median_us="NAN"),
            "median_us: must be a number of µs in [0.001, 1,000,000,000], got nan",
            False,
        ),
        (
            lambda e: e.update(median_us=1e300),
            "median_us: must be a number of µs in [0.001, 1,000,000,000], got 1e+300",
            False,
        ),
        (lambda e: e.update(p10_us=1e6), "[0]: needs p10_us <= median_us <= p90_us, got 1,000,000, 588.548", False),
        (
            lambda e: e["shape"].update(batch=[1]),
            "kernels.decode_attention_mla[0].shape.batch: must be a number",
            False,
        ),
        (
            lambda e: e["shape"].update(batch=True),
            "shape.batch: must be a number in [0, 1,000,000,000,000,000], got True",
            False,
        ),
        (lambda e: e["shape"].update(kv=["bf16"]), "shape.kv: must be a number or a name (text of at most 100", False),
        (lambda e: e["shape"].update(heads={"a": 1}), "shape.heads: must be a number or a name", False),
    ],
)
def test_profile_numbers_are_checked_where_they_enter(tmp_path, monkeypatch, capsys, mutate, expect, last) -> None:
    """A string p90 was a traceback under --repeats, a negative median a TPOT of −22 million ms, Infinity or
    1e300 accepted (NaN was refused), a list a shape value an unhashable-type traceback."""
    prof = profile_variant(tmp_path, mutate, last=last)
    err = refused(monkeypatch, capsys, "run", TINY, "--set", f"profile={prof}", "--repeats", "2", "--jobs", "1")
    assert "p.json: " + expect in err or expect in err, err


def test_a_compact_profile_has_a_spread_for_repeats(tmp_path, monkeypatch, capsys) -> None:
    """`--repeats` read the spread from the raw JSON and failed (AttributeError) on the compact form of a large
    table ({"columns", "rows"}), which every imported profile uses."""
    doc = json.loads((ROOT / "profiles" / "cpu-tiny.json").read_text())
    from simulator.pricing.ops import FAMILIES

    keys = FAMILIES["gemm"]
    rows = [[*(e["shape"][k] for k in keys), e["median_us"]] for e in doc["kernels"]["gemm"]]
    doc["kernels"]["gemm"] = {"columns": [*keys, "median_us"], "rows": rows}
    (tmp_path / "c.json").write_text(json.dumps(doc))
    code, out, err = invoke(
        monkeypatch, capsys, "run", TINY, "--set", f"profile={tmp_path / 'c.json'}", "--repeats", "2", "--jobs", "1"
    )
    assert code == 0 and "Traceback" not in err, err
    assert "95% CI" in out


def test_a_profile_device_that_is_not_text(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"device": ["h200"], "source": "measured", "kernels": {}}))
    err = refused(monkeypatch, capsys, "run", TINY, "--set", f"profile={tmp_path / 'p.json'}")
    assert "p.json: device must be the device's name (text), got ['h200']" in err


# -------------------------------------------------------------------------------------- numbers in a trace


@pytest.mark.parametrize(
    ("rows", "expect"),
    [
        (
            '{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10}\n'
            '{"arrival": 1e250, "prompt_tokens": 100, "output_tokens": 10}\n',
            "t.jsonl: line 2: 'arrival' must be a number of s in [0, 1e+08], got 1e+250",
        ),
        (
            '{"timestamp": 1e300, "input_length": 2048, "output_length": 10}\n',
            "t.jsonl: line 1: 'timestamp' must be a number of ms in [0, 1e+11], got 1e+300",
        ),
        (
            '{"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [' + "1" + "0" * 25 + ", 1]}\n",
            "t.jsonl: line 1: 'hash_ids' must be a list of integers in [0, 9,223,372,036,854,775,807] (63-bit ids)",
        ),
        (
            '{"timestamp": 0, "input_length": 2048, "output_length": 10, "hash_ids": [18446744073709551615]}\n',
            "'hash_ids' must be a list of integers in [0, 9,223,372,036,854,775,807]",
        ),
        (
            '{"arrival": 0, "prompt_tokens": 1024, "output_tokens": 10, "blocks": [9223372036854775808]}\n',
            "t.jsonl: line 1: 'blocks' must be a list of integers in [0, 9,223,372,036,854,775,807]",
        ),
        (
            '{"arrival": 0, "prompt_tokens": 1024, "output_tokens": 10, "session": 9223372036854775808}\n',
            "t.jsonl: line 1: 'session' must be an integer in [0, 9,223,372,036,854,775,807], got 9223372036854775808",
        ),
        (
            '{"arrival": NaN, "prompt_tokens": 1024, "output_tokens": 10}\n',
            "t.jsonl: line 1: 'arrival' must be a number of s in [0, 1e+08], got nan",
        ),
    ],
)
def test_trace_fields_are_checked_where_they_enter(tmp_path, monkeypatch, capsys, rows: str, expect: str) -> None:
    """Arrivals of 1e250 s made durations of 1e250 s (or a traceback in --json); hash ids >= 2^64 and block
    ids >= 2^63 were an OverflowError."""
    err = refused(monkeypatch, capsys, "run", trace_scenario(tmp_path, rows), "--json")
    assert expect in err, err


@pytest.mark.parametrize(
    ("rows", "expect"),
    [
        ("2023-11-16 18:00:00,100,10\n2023-11-16 99:00:00,100,10\n", "a.csv: line 3: expected TIMESTAMP"),
        ("2023-11-16 18:00:00,100,10\n2023-11-16 18:61:00,100,10\n", "a.csv: line 3: expected TIMESTAMP"),
        (
            "2023-11-16 18:00:00,100,10\n9999-11-16 18:00:00,100,10\n",
            "a.csv: line 3: TIMESTAMP lies more than 1e+08 s (the horizon of traffic.duration_s) from the row on line",
        ),
        (
            "9999-11-16 18:00:00,100,10\n2023-11-16 18:00:00,100,10\n",
            "a.csv: line 3: TIMESTAMP lies more than 1e+08 s (the horizon of traffic.duration_s) from the row on line",
        ),
    ],
)
def test_azure_dates_and_hours_are_checked(tmp_path, monkeypatch, capsys, rows: str, expect: str) -> None:
    """Hours of 99 and dates thousands of years apart were read as arrivals 10^11 s later."""
    path = trace_scenario(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows, name="a.csv")
    assert expect in refused(monkeypatch, capsys, "run", path)


def test_a_legitimate_trace_still_runs(tmp_path, monkeypatch, capsys) -> None:
    rows = "".join(
        f'{{"arrival": {i * 0.5}, "prompt_tokens": 1024, "output_tokens": 8, "blocks": [{i}, 7]}}\n' for i in range(6)
    )
    code, out, err = invoke(monkeypatch, capsys, "run", trace_scenario(tmp_path, rows), "--json")
    assert code == 0, err
    assert json.loads(out)["metrics"]["completed"] == 6


def test_a_trace_is_read_only_as_far_as_the_memory_limit_allows(tmp_path) -> None:
    """A trace of more rows than the memory limit holds is refused for its size once that many rows are read,
    not parsed to its end first (a 1 GiB trace of small rows took minutes to refuse)."""
    rows = '{"arrival": 0, "prompt_tokens": 10, "output_tokens": 1}\n' * 20_000 + "not json\n"
    (tmp_path / "t.jsonl").write_text(rows)
    sc = sc_of("model: llama-3.1-70b\ntraffic: {trace: t.jsonl, trace_format: phaseplan}\n")
    small = budget.Limits(max_memory_gib=10_000 * budget.REQUEST_BYTES / budget.GIB)
    with pytest.raises(InputError, match=r"the run would hold about .* for more than 10,000 rows of t.jsonl, over"):
        budget.check(sc, tmp_path, small)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="t.jsonl: line 20001: not valid JSON"):
        budget.check(sc, tmp_path)  # type: ignore[arg-type]
