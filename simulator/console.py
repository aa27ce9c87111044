"""Printing through Rich what came from a user's files as text: a scenario named "[/]" or "[bold]x[/bold]", a
path holding a terminal escape or an emoji code (":boom:") prints as written, never as markup or styling.

Every report prints through a `PlainConsole`: it reads no markup or emoji codes in any string it is given (print
arguments, table cells, titles and captions all pass `render_str`) and shows control characters escaped, line
breaks included: a scenario named "x\nerror: y" must not print a line that reads as the program's own. The
reports' own emphasis is given as `Text` styles, built with `styled`, and their own line breaks as `Text` too.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text


def printable(text: str) -> str:
    """The text as one printable line: every control character (a line break, ESC, a carriage return, a bell,
    NUL) and every other character Python does not print (U+2028, a NEL) shown escaped, `\\n` for a newline.

    Also what a comment line in a written file holds (a shell script's or a YAML file's `# …`): nothing in it
    can end the comment."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


class PlainConsole(Console):
    """A Rich console that prints strings as text: no markup, no emoji codes, no highlighting, no control codes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False)
        return super().render_str(printable(text), **kwargs)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (string, style) pairs, each string shown as text (cf. `Text.assemble`)."""
    out = Text()
    for part in parts:
        text, style = part if isinstance(part, tuple) else (part, "")
        out.append(printable(text), style=style)
    return out
