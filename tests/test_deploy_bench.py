"""After the plan, the deployment's check: `bench.sh` replays the planned traffic with the engines' own clients
(every flag from their released packages) and its result files feed `phaseplan calibrate`, which recovers the
engine they were made on; layouts over several nodes also get LeaderWorkerSet manifests of the same commands."""

from __future__ import annotations

import json
import math
import re
import shlex
import statistics
from pathlib import Path

import pytest
import yaml
from cli_helpers import invoke, run_cli

from simulator.budget import clipped_lognormal_mean
from simulator.calibration import bench_files
from simulator.config import loader
from simulator.deploy import bench, flags, k8s, sglang, vllm
from simulator.engine.run import simulate

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "validation" / "scenarios" / "qwen3-8b-h100.yaml"  # one H100: small and fast to simulate
# The "deployed" engine: SGLang with its overlap scheduler off and more CPU work a step than the preset's.
TRUTH = {"host_step_us": 7500.0}
SETS = ("engine.overlap_scheduler=false",)


def _commands(text: str, engine: str) -> list[list[str]]:
    """The client commands of one engine's branch of bench.sh, as argv."""
    block = text.split(f"  {engine})\n", 1)[1].split(";;", 1)[0]
    return [shlex.split(line) for line in block.splitlines() if line.strip().startswith(("python", "vllm"))]


def test_bench_replays_the_planned_traffic_with_the_clients_flags() -> None:
    sc, _ = loader.load(ROOT / "scenarios" / "fleet-disaggregated.yaml")
    answer = {"winner": {"metrics": {"e2e_ms": {"p50": 8000.0}}}}
    assert bench.busy_clients(sc, answer) == round(1.5 * 3 * 8)  # rate x turns x e2e: Little's law
    text = bench.script(sc, "plan.yaml", flags.release("sglang-bench"), flags.release("vllm-bench"), answer)
    planned, fit = bench.loads(sc, 36)
    assert planned.rate == pytest.approx(sc.traffic.rate * sc.traffic.sessions.turns)
    assert planned.requests == round(sc.traffic.rate * 3 * sc.traffic.duration_s)
    assert [f.concurrency for f in fit] == [36, 18, 9] and all(f.rate is None for f in fit)
    for engine in ("sglang", "vllm"):
        release = flags.release(f"{engine}-bench")
        cmds = _commands(text, engine)
        assert len(cmds) == 4
        for argv in cmds:
            assert release.problems(argv) == [], argv
        assert cmds[0][cmds[0].index("--request-rate") + 1] == "4.5"
        assert [c[c.index("--max-concurrency") + 1] for c in cmds[1:]] == ["36", "18", "9"]
    assert _commands(text, "sglang")[0][:3] == ["python", "-m", "sglang.benchmark.serving"]  # 0.5.23 moved it
    assert "--burstiness" in _commands(text, "vllm")[0]  # bursty arrivals: vLLM's gamma gaps
    assert "sends Poisson arrivals, not the planned bursty ones" in text  # SGLang's client cannot
    assert "sessions of 3 turns are sent as independent requests" in text and "lognormal lengths" in text
    old = bench.script(sc, "plan.yaml", flags.release("sglang-bench", "0.5.3"), flags.release("vllm-bench"))
    assert _commands(old, "sglang")[0][:3] == ["python", "-m", "sglang.bench_serving"]


def test_calibrate_recovers_the_engine_from_the_bench_of_a_plan(tmp_path: Path, monkeypatch, capsys) -> None:
    """plan --out on a study; the closed loops its bench.sh sends run on a 'deployed' engine (simulated: the plan's
    own model with TRUTH's terms), written as SGLang's client writes them; bench.sh's calibrate line fits the
    engine back, within calibrate's stated tolerance (5% on a term, 2% on a figure)."""
    folder = tmp_path / "answer"
    args = ["plan", str(STUDY), "--rate", "8", "--search", "deployment.decode.instances=1", "--runners-up", "0"]
    code, text = run_cli(
        monkeypatch, capsys, *args, "--set", "traffic.requests=120", "--jobs", "1", "--out", str(folder)
    )
    assert code == 0, text
    winner = folder / "qwen3-8b-h100-plan.yaml"
    script = (folder / "bench.sh").read_text()
    sc, _ = loader.load(winner)
    answer = json.loads((folder / "answer.json").read_text())
    _, fit = bench.loads(sc, bench.busy_clients(sc, answer))
    sent = _commands(script, "sglang")[1:]
    assert [a[a.index("--max-concurrency") + 1] for a in sent] == [str(f.concurrency) for f in fit]
    runs = []
    for load in fit:  # what each of bench.sh's closed loops sends, on the deployed engine
        traffic = {
            "concurrency": load.concurrency,
            "requests": load.requests,
            "prompt_tokens": 233,
            "output_tokens": 221,
        }
        sets = [*SETS, *(f"engine.{k}={v}" for k, v in TRUTH.items()), f"traffic={json.dumps(traffic)}"]
        result, _ = simulate(loader.load(winner, sets)[0], folder)
        runs.append(bench_files.run_from_result(result))
    (folder / "results").mkdir()
    bench_files.write_as("sglang", runs, folder / "results" / "sglang.jsonl")
    line = next(x for x in script.splitlines() if x.startswith("phaseplan calibrate"))
    assert line.startswith('phaseplan calibrate --scenario qwen3-8b-h100-plan.yaml "${base[@]}" "${bench[@]}"')
    assert 'files="results/sglang.jsonl"\n    base=() ;;' in script  # the scenario's own engine: SGLang's
    monkeypatch.chdir(folder)
    out = folder / "engines" / "sglang-fitted.yaml"
    # the one term the deployed engine differs in: with the overlap scheduler off the CPU step adds to every step
    # as a graphed decode step's kernel floors do, so the two trade off in these decode-bound loops (--term pins it)
    calibrate = ["calibrate", "--scenario", winner.name, "--bench", "results/sglang.jsonl", "--term", "host_step_us"]
    code, text = run_cli(monkeypatch, capsys, *calibrate, "--out", str(out), "--json", "--set", SETS[0])
    assert code == 0, text
    fitted = yaml.safe_load(out.read_text())
    assert fitted["host_step_us"] == pytest.approx(TRUTH["host_step_us"], rel=0.05)
    for row in json.loads(text)["runs"]:
        assert row["after"] == pytest.approx(row["measured"], rel=0.02), row


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_multi_node_layouts_get_leaderworkersets_of_the_same_commands() -> None:
    sc, _ = loader.load(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml")
    assert k8s.needed(sc)
    pools = sc.deployment.pools()
    text = k8s.manifest(sc, "sglang", flags.release("sglang"), flags.release("sglang-router"), "t")
    docs = _docs(text)
    sets = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in docs if d["kind"] == "LeaderWorkerSet"}
    assert set(sets) == {"prefill", "decode"}
    launch = sglang.launch(sc)
    for role, d in sets.items():
        spec = d["spec"]["leaderWorkerTemplate"]
        assert d["spec"]["replicas"] == pools[role].instances and spec["size"] == pools[role].nodes
        leader = spec["leaderTemplate"]["spec"]["containers"][0]
        worker = spec["workerTemplate"]["spec"]["containers"][0]
        assert leader["resources"]["limits"]["nvidia.com/gpu"] == pools[role].tp // pools[role].nodes
        lead, work = (shlex.split(c["command"][2].removeprefix("exec ")) for c in (leader, worker))
        script = [c for c in launch.commands if c.what.startswith(role)]
        # the launch script's node-1 and node-2 commands, with LeaderWorkerSet's addresses and ranks
        assert lead == [w.replace(f"{role.upper()}_1_NODE_1_HOST", "LWS_LEADER_ADDRESS") for w in script[0].argv]
        assert work[work.index("--node-rank") + 1] == "${LWS_WORKER_INDEX}"
        assert flags.release("sglang").problems(lead) == [] and flags.release("sglang").problems(work) == []
    router = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert (
        "--service-discovery" in router["command"] and flags.release("sglang-router").problems(router["command"]) == []
    )
    v = _docs(k8s.manifest(sc, "vllm", flags.release("vllm"), None, "t"))
    worker = v[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"][2]
    local = pools["prefill"].dp // pools["prefill"].nodes
    assert worker.startswith(f"START_RANK=$((LWS_WORKER_INDEX * {local})); exec vllm serve")
    assert '--data-parallel-start-rank "${START_RANK}"' in worker and "--headless" in worker
    assert vllm.launch(sc).commands  # the same layout's launch script


def test_a_single_node_layout_gets_no_manifest(tmp_path: Path) -> None:
    sc, _ = loader.load(ROOT / "scenarios" / "fleet-disaggregated.yaml")
    assert not k8s.needed(sc)


def test_text_from_the_scenario_stays_in_its_place(tmp_path: Path) -> None:
    """A scenario's name and a model's checkpoint are the user's text: a newline cannot end a comment, and a
    checkpoint path is data in YAML and the shell, never code."""
    sc, _ = loader.load(
        ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml", ['name="evil\\nrm -rf / #"', "model.checkpoint=$(id)'x"]
    )
    for text in (
        k8s.manifest(sc, "sglang", flags.release("sglang"), flags.release("sglang-router"), sc.name),
        bench.script(sc, "a b.yaml", flags.release("sglang-bench"), flags.release("vllm-bench")),
    ):
        assert not re.search(r"^rm -rf", text, re.M)
    docs = _docs(k8s.manifest(sc, "sglang", flags.release("sglang"), None, sc.name))
    env = docs[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "MODEL_PATH", "value": "$(id)'x"}]
    script = bench.script(sc, "a b.yaml", flags.release("sglang-bench"), flags.release("vllm-bench"))
    assert "MODEL_PATH='$(id)'\"'\"'x'" in script


def test_plan_out_writes_the_manifests_where_instances_span_nodes(tmp_path: Path, monkeypatch, capsys) -> None:
    """plan --out on the wide-EP study: launch scripts, bench.sh and both manifests, for the releases asked."""
    study = str(ROOT / "scenarios" / "deepseek-v3-wide-ep.yaml")
    args = ["plan", study, "--rate", "1", "--search", "deployment.decode.instances=1", "--runners-up", "0"]
    args += ["--set", "traffic.requests=16"]
    versions = ["--engine-version", "sglang=0.5.14", "--engine-version", "vllm=0.33.0"]
    code, out, err = invoke(monkeypatch, capsys, *args, *versions, "--jobs", "1", "--out", str(tmp_path))
    assert code == 0, err
    names = {p.name for p in tmp_path.iterdir()}
    assert {"bench.sh", "k8s-sglang.yaml", "k8s-vllm.yaml", "launch-sglang.sh", "launch-vllm.sh"} <= names
    assert "simulator/deploy/flags/sglang-0.5.14.json" in (tmp_path / "launch-sglang.sh").read_text()
    assert "--enable-dp-attention" in (tmp_path / "launch-sglang.sh").read_text()  # 0.5.14's spelling
    assert "--engine-version sglang=0.5.14" in (tmp_path / "commands.sh").read_text()
    code, out, err = invoke(monkeypatch, capsys, *args, "--engine-version", "sglang=9.9", "--out", str(tmp_path / "x"))
    assert code == 2 and "no flags file for it" in err and not (tmp_path / "x").exists()


def _clipped(median: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] of a lognormal X, written out: the part of the mean below the clip, plus the clip times the
    share drawn past it."""
    phi = statistics.NormalDist().cdf
    z = math.log(cap / median) / sigma
    return median * math.exp(sigma**2 / 2) * phi(z - sigma) + cap * (1 - phi(z))


def test_a_clipped_lognormal_is_sent_at_the_mean_its_work_estimate_takes() -> None:
    """The clients draw uniform lengths, so a lognormal one is sent at the mean its clipped draws average (the
    budget's `mean_length`): for the Qwen3-8B scenario the ShareGPT run's printed 233 and 221 tokens, not the
    unclipped median · e^(σ²/2) (249 and 224)."""
    sc, _ = loader.load(ROOT / "validation/scenarios/qwen3-8b-h100.yaml")
    notes: list[str] = []
    prompt, output, ratio = bench.lengths(sc, notes)
    assert (prompt, output, ratio) == (round(_clipped(151.3, 1.0, 1024)), round(_clipped(135.8, 1.0, 2048)), 1.0)
    assert (prompt, output) == (233, 221)
    assert f"lognormal lengths sent at their mean, {prompt} tokens" in notes[0]


def test_a_lognormal_mean_without_a_clip_or_a_spread_is_its_closed_form() -> None:
    """The clipped mean meets its limits: no clip, the lognormal's own mean; no spread, the median itself (or the
    clip below it); a clip far out in the tail, the unclipped mean; and never more than the clip."""
    assert clipped_lognormal_mean(100.0, 1.0, None) == pytest.approx(100.0 * math.exp(0.5))
    assert clipped_lognormal_mean(100.0, 0.0, 1000) == 100.0 and clipped_lognormal_mean(100.0, 0.0, 50) == 50
    assert clipped_lognormal_mean(100.0, 0.5, 1e9) == pytest.approx(100.0 * math.exp(0.125))
    assert clipped_lognormal_mean(100.0, 5.0, 64) < 64
