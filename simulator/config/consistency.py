"""Checks across fields that catch silent nonsense before anything runs: an instance larger than a node, prompts
and answers longer than the model reads, an engine file that contradicts itself. Each raises ValueError('dotted.path:
why'), which the loader turns into one line with the file's line or the --set it came from.
"""

from __future__ import annotations

from simulator.config.scenario import Agentic, Length, Pool, Scenario
from simulator.config.specs import EngineSpec, HardwareSpec


def check(sc: Scenario) -> None:
    check_instances_fit_nodes(sc)
    check_prompts_fit_context(sc)
    check_engine(sc.engine)
    check_profile_prices_every_pool(sc)
    check_tiers(sc)


def check_engine(engine: EngineSpec) -> None:
    """An engine file is text a person or `phaseplan calibrate` wrote: its `sources` and its calibration name only
    the engine's terms (a misspelt one would silently be no term), each calibrated term at the value the engine
    holds, and each error band's median within its worst (a band printed "±90% …, worst 10%")."""
    for term in engine.sources:
        if term not in EngineSpec.model_fields:
            raise ValueError(f"engine.sources.{term}: not a field of the engine")
    if engine.calibration is None:
        return
    for term, t in engine.calibration.terms.items():
        where = f"engine.calibration.terms.{term}"
        if term not in EngineSpec.TERMS:
            raise ValueError(f"{where}: not an engine term (one of {', '.join(EngineSpec.TERMS)})")
        if getattr(engine, term) != t.after:
            raise ValueError(f"{where}.after: {t.after:g} is not the engine's {term} ({getattr(engine, term)})")
    for kind, e in engine.calibration.error.items():
        if e.median > e.max:
            raise ValueError(f"engine.calibration.error.{kind}.median: {e.median:g} is above its max {e.max:g}")


def check_instances_fit_nodes(sc: Scenario) -> None:
    """Tensor parallelism runs inside one node's NVLink domain: an instance of `tp` GPUs must fit in a node.

    An instance that spans nodes says so with `nodes`; how its GPUs split over them is config/parallel.py's rule.
    """
    for name, pool in sc.deployment.pools().items():
        check_pool_fits_node(sc.hardware_of(pool), name, pool)


def check_tiers(sc: Scenario) -> None:
    """A storage tier sits below host memory (pages reach it through host DRAM, as HiCache's L3 does L2's)."""
    for name, pool in sc.deployment.pools().items():
        if pool.storage_tier is not None and pool.host_tier_gib <= 0:
            raise ValueError(
                f"deployment.{name}.storage_tier: a storage tier sits below host memory; give "
                f"deployment.{name}.host_tier_gib too"
            )


def check_profile_prices_every_pool(sc: Scenario) -> None:
    """A profile file holds one device's measured kernels: pools of another GPU have no tables in it, and the
    roofline of one GPU must not price another's steps."""
    if sc.profile == "roofline":
        return
    for name, pool in sc.deployment.pools().items():
        if pool.hardware is not None and pool.hardware.name != sc.hardware.name:
            raise ValueError(
                f"deployment.{name}.hardware: {pool.hardware.name} differs from the scenario's {sc.hardware.name}, "
                f"whose kernels the profile {sc.profile} measures; price pools of different GPUs with "
                "profile: roofline"
            )


def check_pool_fits_node(hw: HardwareSpec, name: str, pool: Pool) -> None:
    """One pool's part of `check_instances_fit_nodes` (`plan` judges pools one at a time)."""
    per_node = hw.gpus_per_node
    if pool.nodes == 1 and pool.tp > per_node:  # across nodes, config/parallel.py checks tp / nodes
        raise ValueError(
            f"deployment.{name}.tp: {pool.tp} GPUs per instance, but {hw.name} has "
            f"{per_node} GPUs per node (set deployment.{name}.nodes for an instance that spans "
            "nodes)"
        )


def largest(length: Length) -> int | None:
    """The longest length a distribution can draw, or None where it has no bound known before drawing."""
    top = {"fixed": length.value, "uniform": length.high}.get(length.dist)
    if top is None:
        return length.max
    return top if length.max is None else min(top, length.max)


def longest_prompt(sc: Scenario) -> int | None:
    """The longest prompt synthetic traffic can make: a conversation's last turn carries every earlier prompt
    and answer. None for a trace, or lengths without a known bound (checked as they are drawn)."""
    t = sc.traffic
    if t.trace is not None:
        return None
    prompt, output = largest(t.prompt_tokens), largest(t.output_tokens)
    if t.agentic is not None:
        return _longest_agent_call(t.agentic, t.shared_prefix_tokens + prompt if prompt else None, output)
    turns = t.sessions.turns
    if prompt is None or (turns > 1 and output is None):
        return None
    return t.shared_prefix_tokens + turns * prompt + (turns - 1) * (output or 0)


def _longest_agent_call(a: Agentic, first: int | None, output: int | None) -> int | None:
    """An agent task's longest prompt: the orchestrator's last call (each call adds an answer and a tool's result;
    the one after its sub-agents adds their reports instead) or a sub-agent's last (the orchestrator's first call
    and answer, then its own calls)."""
    tool = largest(a.tool_output_tokens)
    if first is None or output is None or tool is None:
        return None
    orchestrator = first + (a.steps - 1) * (output + tool)
    if a.subagents and a.steps > 1:
        orchestrator += a.subagents * output - tool
    subagent = first + a.subagent_steps * (output + tool) if a.subagents else 0
    return max(orchestrator, subagent)


def check_prompts_fit_context(sc: Scenario) -> None:
    """A request's prompt and its answer must fit the model's context together (an engine refuses one that asks
    for more, as SGLang and vLLM do), unless the scenario chose to cut them."""
    context = sc.model.context_tokens
    longest = longest_prompt(sc)
    if context is None or longest is None or sc.traffic.truncate_to_context:
        return
    turns = sc.traffic.sessions.turns
    how = f" (the last of {turns} turns, earlier turns and answers included)" if turns > 1 else ""
    if sc.traffic.agentic is not None:
        how = " (an agent task's last call, its earlier calls, answers and tool results included)"
    if longest > context:
        raise ValueError(
            f"traffic.prompt_tokens: prompts reach {longest:,} tokens{how}, over {sc.model.name}'s "
            f"context of {context:,}; shorten them or set traffic.truncate_to_context: true"
        )
    answer = largest(sc.traffic.output_tokens)
    if answer is not None and longest + answer > context:
        raise ValueError(
            f"traffic.output_tokens: prompts of up to {longest:,} tokens{how} and answers of up to "
            f"{answer:,} reach {longest + answer:,}, over {sc.model.name}'s context of {context:,}; "
            "shorten them or set traffic.truncate_to_context: true"
        )
