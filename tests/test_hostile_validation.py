"""Hostile input, round three (issue 37): a validation case is a scenario with the same limits.

`phaseplan validate --suite DIR` ran whatever its cases said: a `prefill_batch` case on a colocated scenario was a
KeyError traceback, `tokens: 10^12` a MemoryError, a `serve` case of 10^12 requests ran without an estimate, a
`decode_batch` of 10^15 sequences and tokens was accepted, a `set:` key 100,000 levels deep was a RecursionError
and `base: ../../etc/passwd` was read. Each is now one line naming the case file and field, exit 2, before any
simulation. Each test failed before the fix.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import invoke

from simulator.validation import fit, suite

HEAD = """id: {id}
engine: sglang-0.5
engine_version: "0.5.6"
unit: tokens/s
published: 50000
source: {{url: https://example.org/a-run, repo: "example/runs results.md @ 0000000000000000000000000000000000000000"}}
quote: "a run"
notes: "n"
"""
WIDE = "base: validation/scenarios/dsv3-h100-wide-ep.yaml\n"  # disaggregated, DP attention, 3 pools' worth of ranks
SERVED = "base: validation/scenarios/qwen3-8b-h100.yaml\n"
COLOCATED = "base: validation/scenarios/dsv3-h100-wide-ep.yaml\nset: {deployment.mode: colocated}\n"
DEEP = ".".join(["a"] * 100_000)

CASES = {  # case body -> what the error names
    "prefill-on-colocated": (
        "metric: input_tok_s\nhow: {kind: prefill_batch, tokens: 1024, prompt: 1024}\n" + COLOCATED,
        "how.pool: the scenario (colocated) has no prefill pool",
    ),
    "ratio-prefill-on-colocated": (
        "metric: ratio\nhow: {kind: ratio, of: {kind: prefill_batch, tokens: 1024, prompt: 1024}, "
        "over: {deployment.mode: colocated}}\n" + WIDE,
        "has no prefill pool",
    ),
    "prefill-of-a-trillion-tokens": (
        "metric: input_tok_s\nhow: {kind: prefill_batch, tokens: 1000000000000, prompt: 1, per: node}\n" + WIDE,
        "how.tokens",
    ),
    "prefill-of-a-million-prompts": (
        "metric: input_tok_s\nhow: {kind: prefill_batch, tokens: 16000000, prompt: 1}\n" + WIDE,
        "more than the prefill pool's max_running",
    ),
    "decode-of-10-15": (
        "metric: output_tok_s\nhow: {kind: decode_batch, batch: 1000000000000000, context: 1000000000000000}\n" + WIDE,
        "how.batch",
    ),
    "decode-over-its-kv": (
        "metric: output_tok_s\nhow: {kind: decode_batch, batch: 1000000, context: 100000000}\n" + WIDE,
        "KV tokens",
    ),
    "serve-of-10-12-requests": (
        "metric: output_tok_s\nhow: {kind: serve}\n" + SERVED + "set: {traffic.requests: 1000000000000}\n",
        "over the limit of 1,000,000 per run",
    ),
    "set-100000-keys-deep": (
        f"metric: output_tok_s\nhow: {{kind: serve}}\n{SERVED}set:\n  ? {DEEP}\n  : 1\n",
        "a path of more than 16 keys",
    ),
    "sweep-set-100000-keys-deep": (
        f"metric: output_tok_s\nhow: {{kind: serve}}\n{SERVED}set:\n  ? sweep.{DEEP}\n  : 1\n",
        "a path of more than 16 keys",
    ),
    "set-a-typo": (
        "metric: output_tok_s\nhow: {kind: serve}\n" + SERVED + "set: {traffic.rat: 2}\n",
        "did you mean",
    ),
    "base-etc-passwd": ("metric: output_tok_s\nhow: {kind: serve}\nbase: ../../../../../../../etc/passwd\n", "base:"),
}


def _suite(tmp_path: Path, name: str, body: str) -> Path:
    folder = tmp_path / "suite"
    (folder / "cases").mkdir(parents=True)
    (folder / "cases" / f"{name}.yaml").write_text(HEAD.format(id=name) + body)
    return folder


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_case_is_one_line_before_any_simulation(tmp_path, monkeypatch, capsys, name: str) -> None:
    body, expected = CASES[name]
    import simulator.validation.measure as measure

    monkeypatch.setattr(measure, "simulate", lambda *a, **k: pytest.fail("a case ran before it was checked"))
    code, out, err = invoke(monkeypatch, capsys, "validate", "--suite", str(_suite(tmp_path, name, body)))
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err and f"cases/{name}.yaml" in err, err
    assert expected in err, err


def test_a_base_outside_the_suite_and_the_repository_is_not_read(tmp_path, monkeypatch, capsys) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text((suite.SUITE / "scenarios" / "qwen3-8b-h100.yaml").read_text())
    folder = _suite(tmp_path, "outside", "metric: output_tok_s\nhow: {kind: serve}\nbase: secret.yaml\n")
    code, _, err = invoke(monkeypatch, capsys, "validate", "--suite", str(folder))  # root is the suite's parent
    assert code == 2 and "base: no scenario file secret.yaml inside the suite's folder" in err, err
    shutil.move(secret, folder / "secret.yaml")  # inside the suite's folder it is the suite's own file
    (folder / "cases" / "outside.yaml").write_text(
        (folder / "cases" / "outside.yaml").read_text().replace("base: secret.yaml", "base: suite/secret.yaml")
    )
    from simulator.validation import case

    assert case.load(folder / "cases" / "outside.yaml", tmp_path).scenario.model.name == "qwen3-8b"


def test_a_case_id_is_a_name_never_a_path(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "x.yaml").write_text("id: x\n")
    code, _, err = invoke(monkeypatch, capsys, "validate", "--case", f"../../../../../../../..{tmp_path}/x")
    assert code == 2 and "no such case" in err and err.count("\n") == 1


def test_the_suites_work_is_estimated_before_it_runs(tmp_path, monkeypatch) -> None:
    """Each served case is within run's limits, yet the fit runs every case dozens of times: the suite's total is
    bounded before anything runs."""
    folder = tmp_path / "suite"
    (folder / "cases").mkdir(parents=True)
    body = "metric: output_tok_s\nhow: {kind: serve}\n" + SERVED + "set: {traffic.requests: 600000}\n"
    for i in range(3):
        (folder / "cases" / f"c{i}.yaml").write_text(HEAD.format(id=f"c{i}") + body)
    cases = suite.load_cases(folder)
    assert all(c.requests == 600_000 for c in cases) and suite.MAX_REQUESTS == 40_000_000
    with pytest.raises(Exception, match=r"about 41,400,000 requests .* over the limit of 40,000,000") as e:
        suite.check_work(cases * 23, [])  # each evaluated once without parameters
    assert type(e.value).__name__ == "InputError"
    suite.check_work(cases * 22, [])  # 39.6M: within
    with pytest.raises(Exception, match=r"up to 139 times by the fit of 16 parameters"):
        suite.check_work(cases[:1], fit.load(suite.SUITE / "fit.yaml"))  # 600,000 × 139 (with its source left out)
    assert fit.evaluations(11) == 1 + fit.ITERATIONS * (11 + fit.BACKTRACKS) + 11 + 1


def test_the_bundled_suite_is_within_its_limits() -> None:
    cases = suite.load_cases()
    suite.check_work(cases, fit.load(suite.SUITE / "fit.yaml"))
