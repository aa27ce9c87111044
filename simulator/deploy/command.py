"""Launch commands as data: what runs where, with which flags, and what the engine cannot express.

The engine modules (`sglang`, `vllm`) are pure functions from a Scenario and the engine's release (its flags,
`simulator.deploy.flags`) to a `Launch`; `render` writes one as a shell script a person reads and copies from, one
block per host. Hosts are shell variables (`PREFILL_1_HOST`), since the plan knows how many machines, not their
names.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from simulator.capacity import GIB, pool_capacity
from simulator.config.scenario import Pool, Scenario
from simulator.deploy.flags import Release
from simulator.deploy.layout import WEIGHTS


@dataclass(frozen=True)
class Command:
    what: str  # "prefill instance 1 of 4" (", node 2 of 2" where an instance spans nodes)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    where: str | None = None  # the host variable of the machine it runs on (None: anywhere, e.g. the router)


@dataclass(frozen=True)
class Launch:
    engine: str  # "SGLang 0.5.23": the release whose flags the commands were checked against
    commands: tuple[Command, ...]
    notes: tuple[str, ...] = field(default=())  # judgements made, and what the engine cannot express
    releases: tuple[Release, ...] = field(default=())  # the releases whose flags files the commands passed
    checkpoint: str = ""  # the default MODEL_PATH: the model's published checkpoint


def checked(
    commands: list[Command], release_of: Callable[[Command], Release]
) -> tuple[tuple[Command, ...], tuple[str, ...]]:
    """The commands their release accepts, and a note for each left out: a command the engine would refuse is not
    written (the file says why instead)."""
    kept, notes = [], []
    for c in commands:
        problems = release_of(c).problems(c.argv)
        if problems:
            notes.append(f"not written: {c.what}: {'; '.join(problems)}")
        else:
            kept.append(c)
    return tuple(kept), tuple(notes)


@dataclass(frozen=True)
class Memory:
    """A pool's memory plan in each engine's own terms (the capacity model's: HBM x mem_fraction - reserve holds
    the weights and the KV cache)."""

    static_fraction: float  # (weights + KV pool) / GPU memory: SGLang's --mem-fraction-static
    kv_bytes: int  # the KV cache one GPU holds: vLLM's --kv-cache-memory-bytes (its utilization would also cover
    # activations and CUDA graphs, which the plan keeps outside the budget)


def memory(sc: Scenario, pool: Pool) -> Memory:
    cap = pool_capacity(sc.model, sc.hardware, pool)
    static = pool.mem_fraction - pool.reserve_gib / sc.hardware.hbm_gib
    return Memory(static, int(cap.kv_budget_gib_per_gpu * GIB))


def weights_source(sc: Scenario) -> str:
    """Which checkpoint each pool's weights need, where it is not the model's release (MODEL_PATH's default)."""
    m = sc.model
    out = []
    for role, pool in roles(sc).items():
        if pool.weights == m.release:
            continue
        if pool.weights == "fp8" and m.release == "bf16":
            out.append(f"{role}: FP8 weights quantized from the BF16 checkpoint as it loads (--quantization fp8)")
        else:
            out.append(
                f"{role}: {WEIGHTS[pool.weights]} weights need a {WEIGHTS[pool.weights]} checkpoint of {m.name} "
                f"(its release is {WEIGHTS[m.release]}): set MODEL_PATH to one"
            )
    return "; ".join(out)


@dataclass(frozen=True)
class Slot:
    """Where one process of one instance runs: its host variable, first GPU, port offset and node rank."""

    role: str
    instance: int  # 1-based
    instances: int
    host: str  # shell variable holding the host name
    first_gpu: int  # GPUs first_gpu .. first_gpu + per_node - 1 of that host
    per_node: int  # GPUs of this instance on this host
    slot: int  # 0-based position of the instance on a shared host (port offset)
    node: int  # 0-based node rank within the instance
    nodes: int
    head: str  # host variable of the instance's first node (where a multi-node instance meets)

    @property
    def what(self) -> str:
        text = f"{self.role} instance {self.instance} of {self.instances}"
        return text + (f", node {self.node + 1} of {self.nodes}" if self.nodes > 1 else "")


def slots(sc: Scenario, role: str, pool: Pool) -> Iterator[Slot]:
    """Every process of a pool: an instance smaller than a node shares it with the next ones (its own GPUs and
    port); one larger spans `nodes` hosts, one process each."""
    per_node_hw = sc.hardware.gpus_per_node
    tag = role.upper()
    if pool.nodes == 1 and pool.tp < per_node_hw:
        share = per_node_hw // pool.tp
        for i in range(pool.instances):
            host = f"{tag}_NODE_{i // share + 1}_HOST"
            yield Slot(role, i + 1, pool.instances, host, (i % share) * pool.tp, pool.tp, i % share, 0, 1, host)
        return
    per = pool.tp // pool.nodes
    for i in range(pool.instances):
        head = f"{tag}_{i + 1}_HOST" if pool.nodes == 1 else f"{tag}_{i + 1}_NODE_1_HOST"
        for n in range(pool.nodes):
            host = head if n == 0 else f"{tag}_{i + 1}_NODE_{n + 1}_HOST"
            yield Slot(role, i + 1, pool.instances, host, 0, per, 0, n, pool.nodes, head)


def roles(sc: Scenario) -> dict[str, Pool]:
    """The pools by the name their processes take: `prefill`/`decode`, or `server` for a colocated pool."""
    pools = sc.deployment.pools()
    return {"server": pools["decode"]} if sc.deployment.mode == "colocated" else pools


def host(var: str) -> str:
    return "${" + var + "}"


def render(launch: Launch, title: str) -> str:
    """A shell script to read: the variables to set, then each command under the host it runs on."""
    used = {a for c in launch.commands for a in _vars(c)} | {c.where for c in launch.commands if c.where}
    hosts = sorted(used - {"MODEL_PATH", "DRAFT_MODEL_PATH"})
    lines = [
        "#!/usr/bin/env bash",
        f"# {comment(title)}",
        f"# Launch commands for {launch.engine}: every flag and value checked against the flags its released",
        "# package defines, as read into",
        *(f"#   {r.file}" for r in launch.releases),
        "# Run each command on the host it names; they are not meant to run in sequence from one shell.",
        "set -euo pipefail",
    ]
    if "MODEL_PATH" in used and launch.checkpoint:  # the published checkpoint unless the operator names another
        lines.append(default_var("MODEL_PATH", launch.checkpoint))
    elif "MODEL_PATH" in used:
        lines.append(': "${MODEL_PATH:?set MODEL_PATH to the checkpoint (a local folder or a Hugging Face repo id)}"')
    if any("DRAFT_MODEL_PATH" in _vars(c) for c in launch.commands):
        lines.append(': "${DRAFT_MODEL_PATH:?set DRAFT_MODEL_PATH to the draft model checkpoint}"')
    lines += [f': "${{{h}:=<{h.lower().removesuffix("_host").replace("_", "-")}-host>}}"' for h in hosts]
    for note in launch.notes:
        lines.append(f"# note: {comment(note)}")
    for c in launch.commands:
        lines += ["", f"# {c.what}" + (f", on {host(c.where)}" if c.where else "")]
        env = " ".join(f"{k}={_quote(v)}" for k, v in c.env)
        words = [_quote(a) for a in c.argv]
        body = " \\\n    ".join(_pairs(words))
        lines.append(f"{env} {body}" if env else body)
    return "\n".join(lines) + "\n"


def default_var(name: str, value: str) -> str:
    """A shell line that gives `name` its default `value` unless it is set; the value is quoted, so text from a
    model's config never expands."""
    return f'if [ -z "${{{name}:-}}" ]; then {name}={shlex.quote(value)}; fi'


def _pairs(words: list[str]) -> list[str]:
    """Words grouped so that the program and its module share the first line, and each flag its values."""
    out: list[str] = []
    for w in words:
        if out and not w.startswith("--") and (out[-1].startswith("--") or len(out) == 1):
            out[-1] += f" {w}"
        else:
            out.append(w)
    return out


def shell_words(argv: list[str] | tuple[str, ...]) -> str:
    """A command as one shell line, each word quoted (placeholders stay expansions)."""
    return " ".join(_quote(a) for a in argv)


def comment(text: str) -> str:
    """Text for a `#` comment line of a script or manifest: one line, no control characters (a newline in a
    scenario's name must not end the comment)."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _quote(word: str) -> str:
    """Quote for the shell but leave `${VAR}` expansions working (they are the placeholders)."""
    if "${" in word and all(ch not in word for ch in "'\"`\\ "):
        return f'"{word}"'
    return shlex.quote(word)


def _vars(c: Command) -> set[str]:
    text = " ".join(c.argv) + " ".join(v for _, v in c.env)
    out = set()
    for part in text.split("${")[1:]:
        out.add(part.split("}", 1)[0])
    return out
