"""A request as traffic produces it: arrival, lengths, and what identifies its prompt's content."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Request:
    id: int
    arrival: float  # seconds since the start of the run
    prompt_tokens: int
    output_tokens: int
    session: int | None = None  # conversation id: routing by session affinity, later turns reuse earlier ones
    client: int | None = None  # closed loop: the client that sent it
    turn: int = 0
    agent: int = 0  # agent tasks: 0 the orchestrating agent, j > 0 its j-th sub-agent
    # Prefix identity: blocks[b] is a hash chained over the prompt's first (b + 1) * block_tokens tokens, so
    # equal values mean an identical prefix up to the end of that block. Only whole blocks are listed.
    blocks: tuple[int, ...] = ()
    block_tokens: int = 512
