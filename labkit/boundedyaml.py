"""YAML from an untrusted file, read in bounded memory and time: `load_bounded`.

PyYAML's safe loader shares an aliased node instead of copying it, so an alias bomb (each
level a list of ten aliases of the one before) loads small, then expands when anything walks
it (validation, the manifest) to billions of nodes; and its composer recurses once per level,
so a document nested 20,000 deep ends in RecursionError. Here the composer counts its depth
as it goes (`MAX_DEPTH`), the composed graph is sized with every alias expanded before a
single Python object is built (`MAX_NODES`), the text is capped (`MAX_BYTES`), and what
results holds only finite numbers. Every failure is one `YAMLLimitError` line.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "YAMLLimitError", "load_bounded"]

#: The largest config read: configs are a few KiB (traces and prompt files live apart); the
#: pure-Python loader reads 256 KiB of the worst text in about a second.
MAX_BYTES = 256 * 1024
#: The deepest nesting of lists and mappings (a real config nests four or five levels).
MAX_DEPTH = 64
#: The most nodes (scalars, lists, mappings) the document may hold with every alias expanded.
MAX_NODES = 100_000


class YAMLLimitError(ValueError):
    """The text is not YAML labkit will read: too big, too deep, too many nodes, a
    recursive alias, a value Python cannot hold, or not YAML at all (one line)."""


class _BoundedLoader(yaml.SafeLoader):
    """The pure-Python safe loader (the C one recurses in C), counting nesting depth."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise YAMLLimitError(
                    f"nested more than {MAX_DEPTH} levels deep at line {mark.line + 1}"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(root: Node) -> int:
    """Nodes in the document with every alias expanded, stopping past `MAX_NODES`."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise YAMLLimitError(f"a recursive alias at line {node.start_mark.line + 1}")
        open_nodes.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            for item in node.value:
                total += size(item)
                if total > MAX_NODES:
                    break
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > MAX_NODES:
                    break
        open_nodes.discard(key)
        if total > MAX_NODES:
            raise YAMLLimitError(
                f"more than {MAX_NODES:,} values once its aliases are expanded (an alias bomb?)"
            )
        sizes[key] = total
        return total

    return size(root)


def _finite(value: Any, where: str, depth: int = 0) -> None:
    """Refuse a number that is not finite (`.inf`, `.nan`, `1.0e+400`) anywhere inside."""
    if isinstance(value, float) and not math.isfinite(value):
        raise YAMLLimitError(f"{where or '(top level)'}: {value} is not a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{where}.{k}" if where else str(k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]", depth + 1)


def load_bounded(text: str) -> Any:
    """Parse one YAML document within the bounds above.

    Raises yaml.YAMLError for text that is not YAML (it carries the line), YAMLLimitError
    for everything else that cannot be read.
    """
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YAMLLimitError(f"larger than {MAX_BYTES // 1024} KiB")
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        data = loader.construct_document(node)
    except RecursionError:  # a bound above was not enough for this Python's stack
        raise YAMLLimitError("nested too deeply to read") from None
    except (ValueError, OverflowError, TypeError) as exc:
        if isinstance(exc, YAMLLimitError):
            raise
        # A value the constructor cannot build: an integer of more than 4300 digits, a date
        # that does not exist, an unhashable mapping key, bad base64 in !!binary.
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise YAMLLimitError(f"a value that cannot be read ({first[:200]})") from None
    finally:
        loader.dispose()
    _finite(data, "")
    return data
