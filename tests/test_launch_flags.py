"""Every flag the launch-command generators write is one the engine's released package defines, with a value it
accepts: the flags files (simulator/deploy/flags, read from the packages on the index by tools/engine_flags.py)
are the parsers each command is checked against, one layout per model class, for the newest releases and the
ones the validation corpus names."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from simulator.capacity import GIB, pool_capacity
from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy import flags, sglang, vllm
from simulator.deploy.command import Command, Launch

ROOT = Path(__file__).resolve().parents[1]
NEWEST = {"sglang": "0.5.23", "sglang-router": "0.3.2", "vllm": "0.34.0"}


def _reader():
    spec = importlib.util.spec_from_file_location("engine_flags", ROOT / "tools" / "engine_flags.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["engine_flags"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_no_engine_source_in_the_repository() -> None:
    assert not (ROOT / "tests" / "fixtures" / "engines").exists()
    assert "tests/fixtures/engines" not in (ROOT / "pyproject.toml").read_text()


def test_the_newest_and_the_corpus_releases_have_flags() -> None:
    """The newest release of each engine on the index when the files were written, and every release a validation
    case names (its engine_version, where that is a release and not a blog's 'main')."""
    for engine, version in NEWEST.items():
        assert flags.versions(engine)[-1] == version
    for path in sorted((ROOT / "validation" / "cases").glob("*.yaml")):
        text = path.read_text()
        named = re.search(r"^engine_version: \"?v?(\d+\.\d+\.\d+(?:\.post\d+)?)", text, re.M)
        engine = re.search(r"^engine: (sglang|vllm)", text, re.M)
        if named and engine:
            assert named.group(1) in flags.versions(engine.group(1)), path.name


def test_each_file_says_where_it_was_read_from() -> None:
    for path in sorted(flags.FOLDER.glob("*.json")):
        data = json.loads(path.read_text())
        src = data["source"]
        assert re.fullmatch(r"[0-9a-f]{64}", src["sha256"]) and src["archive"].startswith(data["engine"].split("-")[0])
        assert len(data["flags"]) > 40, path.name


SOURCE = """
import argparse
from typing import Literal, Optional
CHOICES = ["a", "b"]
Kind = Literal["x", "y"]

class ServerArgs:
    tp_size: A[int, Arg(help="tp", aliases=["--tensor-parallel-size"])] = 1
    kind: A[Optional[Kind], "the kind"] = None
    hidden: A[bool, Arg(no_cli=True)] = False
    on: A[bool, "a switch"] = False
    pick: A[str, Arg(help="choice", choices=CHOICES)] = "a"

class ParallelConfig:
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    backend: Kind = "x"

def add(parser, prefix):
    parser.add_argument("--mem", type=float)
    parser.add_argument(f"--{prefix}policy", choices=["rr", "ll"])
    parser.add_argument("--old", action=DeprecatedStoreTrueAction, new_flag="--on")
    parallel_kwargs = get_kwargs(ParallelConfig)
    group.add_argument("--data-parallel-size", "-dp", **parallel_kwargs["data_parallel_size"])
    group.add_argument("--enable-expert-parallel", **parallel_kwargs["enable_expert_parallel"])
    group.add_argument("--backend", **{**parallel_kwargs["backend"], "default": None})
"""


def test_the_reader_follows_each_engines_rules() -> None:
    """Our own small source in the engines' three styles, read as the tool reads a release."""
    reader = _reader()
    engine = reader.Engine("x", ("m.py",), ("m.py",))
    got = reader.read_flags({"m.py": SOURCE}, engine)
    assert got["--tp-size"] == {"type": "int"}
    assert got["--tensor-parallel-size"] == {"type": "int", "alias_of": "--tp-size"}
    assert got["--kind"] == {"type": "str", "choices": ["x", "y"]}
    assert "--hidden" not in got and got["--on"] == {"type": "bool"}
    assert got["--pick"]["choices"] == ["a", "b"] and got["--mem"] == {"type": "float"}
    assert got["--policy"]["choices"] == ["rr", "ll"]  # the router's prefix left out
    assert got["--old"] == {"type": "bool", "deprecated": True, "replaced_by": "--on"}
    assert got["--data-parallel-size"] == {"type": "int"} and got["-dp"]["alias_of"] == "--data-parallel-size"
    assert got["--enable-expert-parallel"] == {"type": "bool", "negatable": True}
    assert got["--backend"] == {"type": "str", "choices": ["x", "y"]}


def test_a_release_refuses_what_its_parser_would() -> None:
    r = flags.release("vllm", "0.34.0")
    assert r.problems(["vllm", "serve", "m", "--tensor-parallel-size", "8", "--no-enable-prefix-caching"]) == []
    assert r.problems(["vllm", "serve", "m", "--tensor-parallel-size", "eight"]) == [
        "--tensor-parallel-size eight: not an int value"
    ]
    assert "not a flag" in r.problems(["vllm", "serve", "--no-such-flag"])[0]
    assert "not among its choices" in r.problems(["vllm", "serve", "--kv-cache-dtype", "fp7"])[0]
    bad_key = r.problems(["vllm", "serve", "--speculative-config", '{"method": "mtp", "typo": 1}'])
    assert bad_key == ['--speculative-config {"method": "mtp", "typo": 1}: typo is not a key it reads']
    assert "not among its choices" in r.problems(["vllm", "serve", "--speculative-config", '{"method": "magic"}'])[0]
    old = flags.release("sglang", "0.5.23").problems(["python", "-m", "x", "--enable-dp-attention"])
    assert old and "deprecated" in old[0]


def _scenario(path: str, *sets: str) -> Scenario:
    return loader.load(ROOT / path, list(sets))[0]


# One layout per model class, each taking the generators' branches: dense GQA, GQA MoE, MLA MoE with wide EP
# over nodes and MTP, MLA with DSA, the INT4 Kimi fleet disaggregated, instances sharing a node with a draft model.
LAYOUTS = {
    "dense Llama, colocated TP4, FP8 from the BF16 release": _scenario(
        "scenarios/kimi-k2.6-decode.yaml",
        "model=llama-3.1-70b",
        "deployment.decode.tp=4",
        "deployment.decode.weights=fp8",
        "deployment.decode.instances=2",
        "prefix_cache.enabled=false",
    ),
    "GQA MoE Qwen3-235B, EP8 with DP attention": _scenario(
        "validation/scenarios/qwen3-235b-h100-8gpu.yaml", "deployment.decode.dp=8", "deployment.decode.ep=8"
    ),
    "DeepSeek-V3 wide EP, DP attention over nodes, MTP, disaggregated": _scenario("scenarios/deepseek-v3-wide-ep.yaml"),
    "DeepSeek-V3.2 (DSA), TP8": _scenario("validation/scenarios/deepseek-v3.2-h200-8gpu.yaml"),
    "Kimi K2.6 INT4 fleet, disaggregated TP8": _scenario("scenarios/fleet-disaggregated.yaml"),
    "EP8 with redundant experts and two-batch overlap": _scenario(
        "scenarios/deepseek-v3-wide-ep.yaml",
        "deployment.decode.tp=8",
        "deployment.decode.nodes=1",
        "deployment.decode.dp=8",
        "deployment.decode.ep=8",
        "deployment.decode.two_batch_overlap=true",
        "deployment.decode.redundant_experts=8",
    ),
    "TP16 DP2 over two nodes, MoE TP behind DP": _scenario(
        "scenarios/kimi-k2.6-decode.yaml",
        "deployment.decode.tp=16",
        "deployment.decode.nodes=2",
        "deployment.decode.dp=2",
    ),
    "instances sharing a node, a draft model": _scenario(
        "scenarios/fleet-disaggregated.yaml",
        "model=llama-3.1-8b",
        "deployment.prefill.tp=1",
        "deployment.prefill.weights=fp8",
        "deployment.decode.tp=2",
        "deployment.decode.instances=6",
        "deployment.decode.speculative={method: draft, draft_tokens: 3, acceptance: 2.2, draft_model: llama-3.1-8b}",
    ),
}


def _servers(launch: Launch) -> list[Command]:
    return [c for c in launch.commands if "sglang_router.launch_router" not in c.argv]


def _value(c: Command, flag: str) -> str:
    return c.argv[c.argv.index(flag) + 1]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_newest_releases_run_every_layout(name: str) -> None:
    """Every command of the newest releases passes its release's flags, and none is left out."""
    sc = LAYOUTS[name]
    pools = sc.deployment.pools()
    processes = sum(p.instances * p.nodes for p in pools.values())
    s, v = sglang.launch(sc), vllm.launch(sc)
    for launch in (s, v):
        assert not [n for n in launch.notes if n.startswith("not written")], launch.notes
        for c in launch.commands:
            release = flags.release("sglang-router") if "sglang_router.launch_router" in c.argv else launch.releases[0]
            assert release.problems(c.argv) == [], f"{name}: {c.what}"
    assert len(_servers(s)) == processes and len(v.commands) == processes
    for c in _servers(s) + list(v.commands):
        assert ("--trust-remote-code" in c.argv) == sc.model.trust_remote_code


@pytest.mark.parametrize("version", flags.versions("sglang"))
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_sglang_release_gets_its_own_spelling_or_a_note(name: str, version: str) -> None:
    sc = LAYOUTS[name]
    launch = sglang.launch(sc, flags.release("sglang", version))
    for c in launch.commands:
        release = flags.release("sglang-router") if "sglang_router.launch_router" in c.argv else launch.releases[0]
        assert release.problems(c.argv) == []
    written = {c.what for c in launch.commands}
    for role in sc.deployment.pools():
        if not any(w.startswith(role if sc.deployment.mode == "disaggregated" else "server") for w in written):
            assert any(n.startswith("not written") for n in launch.notes), (role, launch.notes)


@pytest.mark.parametrize("version", flags.versions("vllm"))
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_vllm_release_gets_its_own_spelling_or_a_note(name: str, version: str) -> None:
    launch = vllm.launch(LAYOUTS[name], flags.release("vllm", version))
    assert all(launch.releases[0].problems(c.argv) == [] for c in launch.commands)
    assert launch.commands or launch.notes


def test_memory_is_converted_not_copied() -> None:
    """SGLang's static fraction holds weights and KV; vLLM is told the KV bytes themselves (its utilization would
    also cover activations and graphs)."""
    sc = _scenario(
        "scenarios/kimi-k2.6-decode.yaml", "deployment.decode.reserve_gib=7", "deployment.decode.mem_fraction=0.9"
    )
    pool = sc.deployment.decode
    (s,) = _servers(sglang.launch(sc))
    assert float(_value(s, "--mem-fraction-static")) == pytest.approx(0.9 - 7 / sc.hardware.hbm_gib, abs=1e-4)
    (v,) = vllm.launch(sc).commands
    budget = pool_capacity(sc.model, sc.hardware, pool).kv_budget_gib_per_gpu * GIB
    assert int(_value(v, "--kv-cache-memory-bytes")) == int(budget)
    assert "--gpu-memory-utilization" not in v.argv


def test_the_moe_path_that_was_priced() -> None:
    sc = LAYOUTS["DeepSeek-V3 wide EP, DP attention over nodes, MTP, disaggregated"]
    pools = sc.deployment.pools()
    for c in _servers(sglang.launch(sc)):
        role, pool = c.what.split()[0], pools[c.what.split()[0]]
        assert _value(c, "--attn-dp-size") == str(pool.dp) and _value(c, "--ep-size") == str(pool.ep)
        assert _value(c, "--moe-a2a-backend") == "deepep"
        assert _value(c, "--deepep-mode") == {"prefill": "normal", "decode": "low_latency"}[role]
        assert _value(c, "--nnodes") == str(pool.nodes) and _value(c, "--disaggregation-mode") == role
    decode = [c for c in _servers(sglang.launch(sc)) if c.what.startswith("decode")]
    assert all(_value(c, "--speculative-algorithm") == "NEXTN" for c in decode)
    for c in vllm.launch(sc).commands:
        role = c.what.split()[0]
        assert "--enable-expert-parallel" in c.argv and _value(c, "--data-parallel-size") == str(pools[role].dp)
        assert (
            _value(c, "--all2all-backend")
            == {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency"}[role]
        )
        assert json.loads(_value(c, "--kv-transfer-config"))["kv_connector"] == "NixlConnector"
    old = vllm.launch(sc, flags.release("vllm", "0.11.0")).commands  # before --all2all-backend: the environment
    assert all(dict(c.env).get("VLLM_ALL2ALL_BACKEND", "").startswith("deepep") for c in old)
    pre = sglang.launch(sc, flags.release("sglang", "0.5.14")).commands  # before --attn-dp-size
    assert all("--enable-dp-attention" in c.argv for c in pre if "sglang.launch_server" in c.argv)


def test_the_router_knows_every_instance() -> None:
    sc = LAYOUTS["Kimi K2.6 INT4 fleet, disaggregated TP8"]
    router = sglang.launch(sc).commands[-1]
    pools = sc.deployment.pools()
    assert "--pd-disaggregation" in router.argv
    assert router.argv.count("--prefill") == pools["prefill"].instances
    assert router.argv.count("--decode") == pools["decode"].instances


def test_dp_ranks_over_nodes() -> None:
    """Two DP ranks of TP8 over two nodes: SGLang one process a node meeting at the first; vLLM's second node
    headless from DP rank 1; the experts TP-split behind DP attention (no DeepEP, no expert parallelism)."""
    sc = LAYOUTS["TP16 DP2 over two nodes, MoE TP behind DP"]
    s = _servers(sglang.launch(sc))
    assert [_value(c, "--node-rank") for c in s] == ["0", "1"]
    assert _value(s[1], "--dist-init-addr") == "${SERVER_1_NODE_1_HOST}:20000"
    assert not any("--moe-a2a-backend" in c.argv or "--ep-size" in c.argv for c in s)
    v = vllm.launch(sc).commands
    assert [_value(c, "--data-parallel-size-local") for c in v] == ["1", "1"]
    assert "--headless" in v[1].argv and _value(v[1], "--data-parallel-start-rank") == "1"
    assert not any("--enable-expert-parallel" in c.argv for c in v)


def test_vllm_says_what_it_cannot_express() -> None:
    sc = _scenario(
        "scenarios/deepseek-v3-wide-ep.yaml",
        "deployment.decode.dp=1",
        "deployment.decode.nodes=1",
        "deployment.decode.tp=8",
        "deployment.decode.ep=4",
        "deployment.decode.speculative=null",
    )
    launch = vllm.launch(sc)
    assert any("ep 4 of tp 8" in n for n in launch.notes)
    assert not any(c.what.startswith("decode") for c in launch.commands)
    assert any(c.what.startswith("prefill") for c in launch.commands)


def test_instances_sharing_a_node_get_their_own_gpus_and_ports() -> None:
    sc = LAYOUTS["instances sharing a node, a draft model"]
    decode = [c for c in sglang.launch(sc).commands if c.what.startswith("decode")]
    assert len({(c.where, _value(c, "--port")) for c in decode}) == 6
    gpus = [dict(c.env)["CUDA_VISIBLE_DEVICES"] for c in vllm.launch(sc).commands if c.what.startswith("decode")]
    assert gpus[:4] == ["0,1", "2,3", "4,5", "6,7"]
    spec = [json.loads(_value(c, "--speculative-config")) for c in vllm.launch(sc).commands if "decode" in c.what]
    assert spec[0] == {"num_speculative_tokens": 3, "method": "draft_model", "model": "${DRAFT_MODEL_PATH}"}
