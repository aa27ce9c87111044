"""Every flag the launch-command generators can write is one the pinned engine's own argument parser defines.

The parsers are vendored unchanged in tests/fixtures/engines (SGLang 0.5.14, sglang-router 0.3.2, vLLM 0.33.0;
its README names where each came from) and read here with `ast` — the names come from the engines' source, not
from a list typed here. Two checks: every `--flag` written anywhere in a generator module (whatever branch
writes it), and every flag of the commands generated for layouts that take each branch, with the values of
flags whose choices the source spells out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from simulator.config import loader
from simulator.config.scenario import Scenario
from simulator.deploy import sglang, vllm
from simulator.deploy.command import Command

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / "tests" / "fixtures" / "engines"
SGLANG_ARGS = ENGINES / "sglang-0.5.14" / "sglang" / "srt" / "server_args.py"
ROUTER_ARGS = ENGINES / "sglang-router-0.3.2" / "sglang_router" / "router_args.py"
VLLM_ARGS = ENGINES / "vllm-0.33.0" / "vllm" / "engine" / "arg_utils.py"
VLLM_SERVE_ARGS = ENGINES / "vllm-0.33.0" / "vllm" / "entrypoints" / "common" / "cli_args.py"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

Flags = dict[str, list[str] | None]  # flag -> its choices where the source lists them, else None


def _literal_list(node: ast.AST, names: dict[str, list[str]]) -> list[str] | None:
    """A list of string constants, or a module-level name bound to one."""
    if isinstance(node, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def _module_lists(tree: ast.Module) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = _literal_list(node.value, {})
            if values is not None:
                out[node.targets[0].id] = values
    return out


def _flag_text(node: ast.AST, prefix: str) -> str | None:
    """`"--x"`, or `f"--{prefix}x"` with the prefix the launcher uses (the router's standalone one is empty)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else prefix for v in node.values)  # type: ignore[misc]
    return None


def add_argument_flags(tree: ast.Module, prefix: str = "") -> Flags:
    """Flags of every `*.add_argument("--flag", ..., choices=[...])` call."""
    names = _module_lists(tree)
    out: Flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            choices = next((_literal_list(k.value, names) for k in node.keywords if k.arg == "choices"), None)
            for a in node.args:
                text = _flag_text(a, prefix)
                if text is not None and text.startswith("--"):
                    out[text] = choices
    return out


def _literal_choices(annotation: ast.AST) -> list[str] | None:
    """`Literal["a", "b"]` (inside Optional[...] too) as its values."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return [e.value for e in elts if isinstance(e, ast.Constant)]
    return None


def sglang_field_flags(tree: ast.Module) -> Flags:
    """`ServerArgs` fields annotated `A[T, "help"]` or `A[T, Arg(...)]`: `--field-name` (or `cli_name`) and its
    `aliases`, skipping `no_cli=True` (the rule of `add_cli_args_from_dataclass` in arg_groups/arg_utils.py)."""
    names = _module_lists(tree)
    out: Flags = {}
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = st.annotation
        if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
            continue
        inner, meta = ann.slice.elts[:2]  # type: ignore[attr-defined]
        kw = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
        if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value:  # type: ignore[attr-defined]
            continue
        choices = _literal_list(kw["choices"], names) if "choices" in kw else _literal_choices(inner)
        main = kw["cli_name"].value if "cli_name" in kw else "--" + st.target.id.replace("_", "-")  # type: ignore[attr-defined]
        aliases = _literal_list(kw["aliases"], names) or [] if "aliases" in kw else []
        for flag in [main, *aliases]:
            out[flag] = choices
    return out


def dataclass_field_flags(tree: ast.Module, classes: set[str]) -> Flags:
    """vLLM's frontend dataclasses: each public field is `--field-name` (`add_cli_args` in cli_args.py)."""
    out: Flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id[0] != "_":
                    out["--" + st.target.id.replace("_", "-")] = None
    return out


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


SERVER = {**sglang_field_flags(_parse(SGLANG_ARGS)), **add_argument_flags(_parse(SGLANG_ARGS))}
ROUTER = add_argument_flags(_parse(ROUTER_ARGS), prefix="")
_serve = _parse(VLLM_SERVE_ARGS)
VLLM = {
    **add_argument_flags(_parse(VLLM_ARGS)),
    **dataclass_field_flags(_serve, {"FrontendArgs", "BaseFrontendArgs"}),
    **add_argument_flags(_serve),
}


def test_the_parsers_are_read() -> None:
    """The extraction finds the flags these engines are known by (a broken reader would pass everything below)."""
    assert {"--tp-size", "--tensor-parallel-size", "--ep", "--enable-dp-attention", "--kv-cache-dtype"} <= set(SERVER)
    assert SERVER["--kv-cache-dtype"] is not None and "fp8_e4m3" in SERVER["--kv-cache-dtype"]
    assert {"--pd-disaggregation", "--prefill", "--decode", "--policy"} <= set(ROUTER)
    assert {"--tensor-parallel-size", "--data-parallel-size", "--kv-transfer-config", "--port"} <= set(VLLM)
    assert len(SERVER) > 300 and len(ROUTER) > 50 and len(VLLM) > 200


def _written(module: object) -> set[str]:
    """Every `--flag` in a string constant of a generator module, whichever branch would write it."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    return {
        m
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
        for m in FLAG.findall(n.value)
    }


def test_every_flag_a_generator_writes_is_the_engines() -> None:
    assert _written(sglang) - set(SERVER) - set(ROUTER) == set()
    assert _written(vllm) - set(VLLM) == set()
    assert len(_written(sglang)) > 25 and len(_written(vllm)) > 15


def _scenario(path: str, *sets: str) -> Scenario:
    return loader.load(ROOT / "scenarios" / path, list(sets))[0]


LAYOUTS = {
    "disaggregated TP8": _scenario("fleet-disaggregated.yaml"),
    "colocated, two instances, no prefix cache": _scenario(
        "kimi-k2.6-decode.yaml", "deployment.decode.instances=2", "prefix_cache.enabled=false"
    ),
    "wide EP, DP attention over nodes, MTP": _scenario("deepseek-v3-wide-ep.yaml"),
    "EP8 with redundant experts, two-batch overlap, FP8 weights": _scenario(
        "deepseek-v3-wide-ep.yaml",
        "deployment.decode.tp=8",
        "deployment.decode.nodes=1",
        "deployment.decode.dp=8",
        "deployment.decode.ep=8",
        "deployment.decode.two_batch_overlap=true",
        "deployment.decode.redundant_experts=8",
    ),
    "DP attention with MoE TP (no EP)": _scenario(
        "deepseek-v3-wide-ep.yaml",
        "deployment.decode.tp=8",
        "deployment.decode.nodes=1",
        "deployment.decode.dp=8",
        "deployment.decode.ep=1",
        "deployment.decode.redundant_experts=0",
    ),
    "several instances on one node, a draft model": _scenario(
        "fleet-disaggregated.yaml",
        "model=llama-3.1-8b",
        "deployment.prefill.tp=1",
        "deployment.prefill.weights=fp8",
        "deployment.decode.tp=2",
        "deployment.decode.instances=6",
        "deployment.decode.weights=w4a8",
        "deployment.decode.speculative={method: draft, draft_tokens: 3, acceptance: 2.2, draft_model: llama-3.1-8b}",
    ),
}


def _flags(c: Command) -> list[tuple[str, str | None]]:
    """(flag, its first value) for each flag of a command."""
    out = []
    for i, a in enumerate(c.argv):
        if a.startswith("--"):
            nxt = c.argv[i + 1] if i + 1 < len(c.argv) else None
            out.append((a, nxt if nxt is not None and not nxt.startswith("--") else None))
    return out


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_generated_commands_use_the_engines_flags_and_values(name: str) -> None:
    sc = LAYOUTS[name]
    for launch, parsers in ((sglang.launch(sc), None), (vllm.launch(sc), VLLM)):
        assert launch.commands
        for c in launch.commands:
            known = parsers or (ROUTER if "sglang_router" in c.argv[2] else SERVER)
            for flag, value in _flags(c):
                assert flag in known, f"{name}: {c.what}: {flag} is not a flag of {launch.engine}"
                choices = known[flag]
                if choices is not None and value is not None:
                    assert value in choices, f"{name}: {c.what}: {flag} {value} not among {choices}"


def _value(c: Command, flag: str) -> str:
    return c.argv[c.argv.index(flag) + 1]


def test_dp_attention_without_ep_runs_no_deepep() -> None:
    """MoE TP behind DP attention: SGLang's dense TP MoE, not DeepEP's all-to-alls (the model prices it so)."""
    sc = LAYOUTS["DP attention with MoE TP (no EP)"]
    decode = [c for c in sglang.launch(sc).commands if c.what.startswith("decode")]
    assert decode and all("--enable-dp-attention" in c.argv for c in decode)
    assert not any("--moe-a2a-backend" in c.argv or "--ep-size" in c.argv for c in decode)


def test_sglang_commands_carry_the_layout() -> None:
    sc = LAYOUTS["wide EP, DP attention over nodes, MTP"]
    pools = sc.deployment.pools()
    cmds = sglang.launch(sc).commands
    servers = [c for c in cmds if "sglang.launch_server" in c.argv]
    assert len(servers) == sum(p.instances * p.nodes for p in pools.values())
    for c in servers:
        pool = pools[c.what.split()[0]]
        assert _value(c, "--tp-size") == str(pool.tp) and _value(c, "--dp-size") == str(pool.dp)
        assert _value(c, "--ep-size") == str(pool.ep) and "--enable-dp-attention" in c.argv
        assert _value(c, "--kv-cache-dtype") == pool.kv_cache
        assert _value(c, "--nnodes") == str(pool.nodes)
        assert _value(c, "--disaggregation-mode") == c.what.split()[0]
    decode = [c for c in servers if c.what.startswith("decode")]
    assert all(_value(c, "--speculative-algorithm") == "NEXTN" for c in decode)
    router = cmds[-1]
    assert "--pd-disaggregation" in router.argv
    assert router.argv.count("--prefill") == pools["prefill"].instances
    assert router.argv.count("--decode") == pools["decode"].instances


def test_vllm_says_what_it_cannot_express() -> None:
    sc = _scenario(
        "deepseek-v3-wide-ep.yaml",
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
    sc = LAYOUTS["several instances on one node, a draft model"]
    decode = [c for c in sglang.launch(sc).commands if c.what.startswith("decode")]
    seen = {(c.where, _value(c, "--port")) for c in decode}
    assert len(seen) == 6  # 6 TP2 instances over two 8-GPU nodes: no two on one host and port
    gpus = [dict(c.env)["CUDA_VISIBLE_DEVICES"] for c in vllm.launch(sc).commands if c.what.startswith("decode")]
    assert gpus[:4] == ["0,1", "2,3", "4,5", "6,7"]
