"""Scenario YAML read with bounds: UTF-8 text of limited size, limited nesting, aliases that cannot expand
without bound, and no duplicate keys.

PyYAML's safe loader alone expands a "billion laughs" as soon as anything walks the data, recurses until the
interpreter overflows on deep nesting, and keeps the last of two equal keys, silently. Each limit here is an
error with the line where it was crossed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from simulator import input_files

MAX_BYTES = input_files.SCENARIO.max_bytes  # scenario text, from a file or not
MAX_DEPTH = 64  # nested mappings and lists: a scenario needs about 6
MAX_NODES = 200_000  # nodes of the document with every alias expanded (what anything walking it will visit)
MERGE_TAG = "tag:yaml.org,2002:merge"


class LimitError(ComposerError):
    """A document over one of the limits: never read as a plain string, unlike a syntax error in a --set."""


def read_text(path: str | Path) -> str:
    """A scenario file's text, read under `input_files.SCENARIO`'s limits (regular, 1 MiB, UTF-8)."""
    return input_files.read_text(path, input_files.SCENARIO)


class _Loader(yaml.SafeLoader):
    """The safe loader, counting nodes (aliases by the size of what they stand for) and depth as it composes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its node count with aliases expanded, once complete

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise LimitError(
                None,
                None,
                f"the document expands to more than {MAX_NODES:,} nodes (aliases "
                "counted as what they repeat: an alias bomb?)",
                mark,
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise LimitError(None, None, "an alias refers to a node that contains it (a recursive alias)", mark)
            self._count(size, mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise LimitError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
        before = self._nodes
        self._count(1, mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._sizes[id(node)] = self._nodes - before
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != MERGE_TAG:
                    k = (key.tag, key.value)
                    if k in seen:
                        raise ConstructorError(
                            None, None, f"duplicate key '{key.value}' (first on line {seen[k]})", key.start_mark
                        )
                    seen[k] = key.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # Python refuses to parse integers of more than 4,300 digits
            raise LimitError(None, None, "integer too long", node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def quoted(text: str) -> str:
    """A string as a double-quoted YAML scalar on one line, written by the emitter (a name may hold quotes, line
    breaks or text YAML would read as a mapping)."""
    return yaml.safe_dump(text, default_style='"', allow_unicode=True, width=1 << 30).rstrip("\n")


def parse(text: str) -> tuple[Any, yaml.Node | None]:
    """The data and the composed node tree (for key lines); raises yaml.YAMLError, LimitError included."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node
