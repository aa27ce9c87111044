"""Report lines folded to the console's width at phrase boundaries, not wherever the last word ends.

A line such as "within p95 TTFT <= 2,000 ms, p95 TPOT <= 50 ms" cut at 80 columns by plain word wrapping leaves
"p95" on one line and "TTFT <= 2,000 ms" on the next. Here a line breaks after a `,` `;` or `:` or before a
`(`, and within a phrase (at a word) only when the phrase alone is longer than a line; continuation lines are
indented under their first, so an item and its overflow read as one.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from simulator.console import printable

BREAK = re.compile(r"(?<=[,;:])\s+|\s+(?=\()")  # where a phrase ends: after , ; : and before (
WORD = re.compile(r"\s+")
CONTINUATION = 2  # extra columns a continuation line is indented by, beyond its first line's own indent


def _chunks(plain: str, pattern: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the pieces between matches of `pattern` (the separators themselves left out)."""
    spans, start = [], 0
    for m in pattern.finditer(plain):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(plain):
        spans.append((start, len(plain)))
    return spans


def fold(text: str | Text, width: int) -> list[Text]:
    """The lines of `text` at most `width` columns wide where its words allow. A string is text, never markup
    (a scenario named "[/]" is printed as written; emphasis comes as a styled `Text`), its control characters
    shown escaped."""
    src = text if isinstance(text, Text) else Text(printable(text))
    out: list[Text] = []
    for line in src.split("\n", allow_blank=True):
        out += _fold_line(line, max(width, 20))
    return out


def _fold_line(line: Text, width: int) -> list[Text]:
    plain = line.plain
    if len(plain) <= width:
        return [line]
    lead = len(plain) - len(plain.lstrip(" "))
    indent = " " * (lead + CONTINUATION)
    pieces: list[tuple[int, int]] = []  # phrases, and the words of a phrase longer than a continuation line
    for start, end in _chunks(plain[lead:], BREAK):
        start, end = start + lead, end + lead
        if end - start <= width - len(indent):
            pieces.append((start, end))
        else:
            pieces += [(start + a, start + b) for a, b in _chunks(plain[start:end], WORD)]
    lines: list[Text] = []
    cur: Text | None = None
    for start, end in pieces:
        piece = line[start:end]
        if cur is None:
            cur = Text(plain[:lead]) + piece
        elif cur.cell_len + 1 + piece.cell_len <= width:
            cur = cur + Text(" ") + piece
        else:
            lines.append(cur)
            cur = Text(indent) + piece
    if cur is not None:
        lines.append(cur)
    return lines


class Folding:
    """A console whose text lines fold at phrases (`fold`); tables and other renderables print as they are."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.width = console.width

    def print(self, obj: Any = "", **kwargs: Any) -> None:
        if not isinstance(obj, str | Text):
            self.console.print(obj, **kwargs)
            return
        kwargs.pop("overflow", None)
        for line in fold(obj, self.width):
            self.console.print(line, overflow="fold", **kwargs)


class Folded:
    """A renderable of text folded by `fold` at whatever width it is printed at (a table's notes, say)."""

    def __init__(self, text: str | Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from fold(self.text, options.max_width)
