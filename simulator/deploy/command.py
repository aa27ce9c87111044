"""Launch commands as data: what runs where, with which flags, and what the engine cannot express.

The engine modules (`sglang`, `vllm`) are pure functions from a Scenario to a `Launch`; `render` writes one as a
shell script a person reads and copies from, one block per host. Hosts are shell variables (`PREFILL_1_HOST`),
since the plan knows how many machines, not their names.

Every word is quoted for the shell and every comment is one line (`comment`): a scenario's name, a GPU's or a
model's may come from a user's file and hold a line break, `$(…)`, backticks or quotes, and the script must run
nothing but the engine. The only expansions left to the shell are the `${VAR}` placeholders written here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from simulator.config.scenario import Pool, Scenario
from simulator.console import printable

PLACEHOLDER = re.compile(r"\$\{[A-Z][A-Z0-9_]*\}")  # `${MODEL_PATH}`: what a word may leave to the shell


@dataclass(frozen=True)
class Command:
    what: str  # "prefill instance 1 of 4" (", node 2 of 2" where an instance spans nodes)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    where: str | None = None  # the host variable of the machine it runs on (None: anywhere, e.g. the router)


@dataclass(frozen=True)
class Launch:
    engine: str  # "SGLang 0.5.14": the release whose argument parser the flags were checked against
    commands: tuple[Command, ...]
    notes: tuple[str, ...] = field(default=())  # judgements made, and what the engine cannot express


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
        comment(title),
        comment(
            f"Launch commands for {launch.engine} (flags checked against its argument parser: tests/fixtures/engines)."
        ),
        "# Run each command on the host it names; they are not meant to run in sequence from one shell.",
        "set -euo pipefail",
        ': "${MODEL_PATH:?set MODEL_PATH to the checkpoint (a local folder or a Hugging Face repo id)}"',
    ]
    if any("DRAFT_MODEL_PATH" in _vars(c) for c in launch.commands):
        lines.append(': "${DRAFT_MODEL_PATH:?set DRAFT_MODEL_PATH to the draft model checkpoint}"')
    lines += [f': "${{{h}:=<{h.lower().removesuffix("_host").replace("_", "-")}-host>}}"' for h in hosts]
    for note in launch.notes:
        lines.append(comment(f"note: {note}"))
    for c in launch.commands:
        lines += ["", comment(c.what + (f", on {host(c.where)}" if c.where else ""))]
        env = " ".join(f"{k}={_quote(v)}" for k, v in c.env)
        words = [_quote(a) for a in c.argv]
        body = " \\\n    ".join(_pairs(words))
        lines.append(f"{env} {body}" if env else body)
    return "\n".join(lines) + "\n"


def _pairs(words: list[str]) -> list[str]:
    """Words grouped so that the program and its module share the first line, and each flag its values."""
    out: list[str] = []
    for w in words:
        if out and not w.startswith("--") and (out[-1].startswith("--") or len(out) == 1):
            out[-1] += f" {w}"
        else:
            out.append(w)
    return out


def comment(text: str) -> str:
    """A comment line of a written script or YAML file: `text` as one printable line, which nothing ends early."""
    return f"# {printable(text)}"


def _quote(word: str) -> str:
    """The word for the shell: its literal text quoted as `shlex.quote` quotes it, each `${VAR}` placeholder left
    to expand (in double quotes). A word whose literal text needs no quoting is written `"…"` whole, as a person
    would write it."""
    holes = PLACEHOLDER.findall(word)
    if not holes:
        return shlex.quote(word)
    parts = PLACEHOLDER.split(word)
    if all(shlex.quote(p) == p for p in parts if p):
        return f'"{word}"'
    # parts and holes alternate: literal, placeholder, literal, ..., literal
    pieces = [shlex.quote(p) if p else "" for p in parts[:1]]
    for h, p in zip(holes, parts[1:], strict=True):
        pieces += [f'"{h}"', shlex.quote(p) if p else ""]
    return "".join(pieces)


def _vars(c: Command) -> set[str]:
    """The placeholders a command leaves to the shell (the variables the script's head sets or asks for)."""
    return {h[2:-1] for word in (*c.argv, *(v for _, v in c.env)) for h in PLACEHOLDER.findall(word)}
