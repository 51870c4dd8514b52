"""Reading YAML the way yacron's strictyaml does, fast.

Every scalar is read as the text written (``1.10`` stays ``"1.10"``, ``12:30``
stays ``"12:30"``, ``yes`` stays ``"yes"``); the models convert it by the
field's type.  The one exception is an empty plain scalar (``key:`` with
nothing after it), read as ``None``.  Duplicate keys are errors (PyYAML would
silently keep the last one).  ``<<`` merge keys work as in YAML 1.1.

Parsing is done by libyaml when available; the composed node tree is kept
beside the values so an error can be located (:func:`locate`) without
parsing again.

Size: :func:`parse` takes a budget of values.  Nodes are counted while they are
composed (the composer, libyaml's too, calls ``descend_resolver`` before each
node) and composition stops as soon as the budget is passed, so a file of
millions of tiny values costs at most the budget's worth of nodes; then the
values are counted again with every alias expanded (a "billion laughs" document
is a few nodes that expand to billions of values) and refused past the budget.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cronstable.config.limits import DEFAULT_LIMITS
from cronstable.errors import KeyPath

try:  # libyaml is an order of magnitude faster; fall back to pure Python without it
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - depends on how PyYAML was built

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str | bytes) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"


class YamlError(Exception):
    """A document is not well-formed YAML or uses a construct we refuse."""

    def __init__(
        self, message: str, line: int | None, column: int | None, key: KeyPath = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.key = key


class DuplicateKeyError(YamlError):
    pass


class NodeLimitError(YamlError):
    """The document holds more values than the budget :func:`parse` was given."""


class _OverBudget(Exception):
    def __init__(self, line: int | None, column: int | None) -> None:
        super().__init__(line)
        self.line = line
        self.column = column


_STANDARD_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "timestamp", "binary", "seq", "map")
)
MAX_DEPTH = 100
"""Deepest nesting of collections, aliases expanded (real configurations use under 10).

Checked while building, so every later recursive walk (merging, validation,
serialization) stays far from Python's recursion limit."""
_UTF8_CHUNK = 1 << 20


class _Resolver(yaml.resolver.BaseResolver):
    """Every plain scalar is text, except the empty one (null) and ``<<`` (merge)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if implicit[0]:
                if value == "":
                    return _NULL
                if value == "<<":
                    return _MERGE
            return _STR
        if kind is SequenceNode:
            return "tag:yaml.org,2002:seq"
        return "tag:yaml.org,2002:map"

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass


class _NodeLoader(_Parser, yaml.composer.Composer, _Resolver):
    """Composes nodes with their positions; :class:`_Builder` turns them into values.

    Counts the nodes as they are composed and stops past ``budget``.
    """

    def __init__(self, stream: str | bytes, budget: int) -> None:
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        _Resolver.__init__(self)
        self.budget = budget
        self.count = 0

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        # called before every node is composed (not for aliases, which add no node)
        self.count += 1
        if self.count > self.budget:
            raise _OverBudget(*_near(current_node, current_index))


class _SmallLoader(_NodeLoader):
    """For a document too short to reach its budget: nodes are not counted (a tenth of
    the composition's time).  Each node takes at least a byte of text, but for a few
    (an empty document's, ``[?]``'s), so a document of ``n`` bytes composes at most
    ``n + 4`` nodes; aliases compose none (the builder counts their uses)."""

    descend_resolver = _Resolver.descend_resolver


def _loader_for(stream: str | bytes, budget: int) -> _NodeLoader:
    if 2 * len(stream) + 16 <= budget:  # twice the bound, for good measure
        return _SmallLoader(stream, budget)
    return _NodeLoader(stream, budget)


def _near(parent: Node | None, index: Any) -> tuple[int | None, int | None]:
    """Where composition is: the latest node composed under ``parent`` (1-based)."""
    mark = None
    if isinstance(index, Node):  # a mapping value: its key
        mark = index.start_mark
    elif isinstance(parent, SequenceNode) and parent.value:
        mark = parent.value[-1].start_mark
    elif isinstance(parent, MappingNode) and parent.value:
        mark = parent.value[-1][1].start_mark
    elif parent is not None:
        mark = parent.start_mark
    if mark is None:
        return None, None
    return mark.line + 1, mark.column + 1


def _scalar(node: Node) -> str | None:
    """A scalar's value: its text, or None for an empty, ``~`` or ``null`` plain scalar.

    A scalar holds nothing an alias could loop through or nest, so the builder
    makes one without the bookkeeping collections need (most nodes are scalars)."""
    tag = node.tag
    if tag == _STR:
        return node.value  # type: ignore[no-any-return]
    if tag not in _STANDARD_TAGS and tag != _MERGE:
        raise _error(f"unsupported tag {tag!r}", node)
    return None if tag == _NULL and node.value in ("", "~", "null") else node.value


def _error(message: str, node: Node) -> YamlError:
    return YamlError(message, node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Nodes → str/None/list/dict, checking what PyYAML lets through."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.done: dict[int, Any] = {}
        self.busy: set[int] = set()
        self.size: dict[int, int] = {}
        self.height: dict[int, int] = {}
        """Levels of collections in a built node (a scalar is 0)."""
        self.open: list[Node] = []
        """The nodes being built, outermost first."""
        self.path: list[str | int] = []
        """Where the builder is, for error messages."""

    def build(self, node: Node) -> Any:
        key = id(node)
        if key in self.done:
            if len(self.path) + self.height[key] > MAX_DEPTH:
                # an alias: its node sits at the anchor, the collection using it is here
                raise self._too_deep(self.open[-1] if self.open else node)
            return self.done[key]
        if len(self.path) > MAX_DEPTH:
            raise self._too_deep(node)
        if key in self.busy:
            raise _error("an alias refers to a node that contains it", node)
        if node.tag not in _STANDARD_TAGS and node.tag != _MERGE:
            raise _error(f"unsupported tag {node.tag!r}", node)
        self.busy.add(key)
        self.open.append(node)
        size = 1
        height = 0
        value: Any
        if isinstance(node, ScalarNode):
            value = _scalar(node)
        elif isinstance(node, SequenceNode):
            value = []
            for index, child in enumerate(node.value):
                # most values are scalars: built without recursion or bookkeeping
                if type(child) is ScalarNode and len(self.path) < MAX_DEPTH:
                    value.append(_scalar(child))
                    size += 1
                else:
                    self.path.append(index)
                    value.append(self.build(child))
                    self.path.pop()
                    size += self.size[id(child)]
                    height = max(height, self.height[id(child)])
                if size > self.budget:
                    raise self._over(child)
            height += 1
        else:
            value, size, height = self.mapping(node)
        self.open.pop()
        self.busy.discard(key)
        self.size[key] = size
        self.height[key] = height
        if size > self.budget:
            raise self._over(node)
        self.done[key] = value
        return value

    def _too_deep(self, node: Node) -> YamlError:
        mark = node.start_mark
        return YamlError(
            f"nests too deeply below here (more than {MAX_DEPTH} levels)",
            mark.line + 1,
            mark.column + 1,
            tuple(self.path[:3]),  # enough to name the section; the line says where
        )

    def _over(self, node: Node) -> NodeLimitError:
        mark = node.start_mark
        return NodeLimitError(
            f"too many values: more than {self.budget:,}, counting each use of an alias as a copy",
            mark.line + 1,
            mark.column + 1,
        )

    def mapping(self, node: Node) -> tuple[dict[str, Any], int, int]:
        merged: dict[str, Any] = {}
        own: dict[str, Any] = {}
        seen: dict[str, Node] = {}
        size = 1
        height = 0
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                size += 2 if isinstance(value_node, SequenceNode) else 1
                for source in reversed(sources):
                    if not isinstance(source, MappingNode):
                        raise _error("a merge key (<<) takes a mapping or a list of them", source)
                    merged.update(self.build(source))
                    size += self.size[id(source)]
                    height = max(height, self.height[id(source)] - 1)
                    if size > self.budget:
                        raise self._over(source)
                continue
            if not isinstance(key_node, ScalarNode) or key_node.value is None:
                raise _error("mapping keys must be plain text", key_node)
            name = key_node.value
            if name in seen:
                first = seen[name].start_mark.line + 1
                mark = key_node.start_mark
                raise DuplicateKeyError(
                    f"duplicate key {name!r} (first defined on line {first})",
                    mark.line + 1,
                    mark.column + 1,
                    (*self.path, name),
                )
            seen[name] = key_node
            # most values are scalars: built without recursion or bookkeeping
            if type(value_node) is ScalarNode and len(self.path) < MAX_DEPTH:
                own[name] = _scalar(value_node)
                size += 2
            else:
                self.path.append(name)
                own[name] = self.build(value_node)
                self.path.pop()
                size += 1 + self.size[id(value_node)]
                height = max(height, self.height[id(value_node)])
            if size > self.budget:
                raise self._over(value_node)
        if merged:
            merged.update(own)
            return merged, size, height + 1
        return own, size, height + 1


def _mark_of(exc: yaml.YAMLError) -> tuple[int | None, int | None]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return None, None
    return mark.line + 1, mark.column + 1


_OPENERS = {
    "while scanning a quoted scalar": "the quote",
    "while parsing a flow sequence": "the '['",
    "while parsing a flow mapping": "the '{'",
}


def _unclosed(exc: yaml.YAMLError, text: str) -> YamlError | None:
    """A quote or bracket still open at the end of the file, reported where it opens.

    The parser notices only at the end of the file; that position says nothing
    about where the mistake is, the opening one does (PyYAML's context mark).
    """
    context = getattr(exc, "context", None)
    opened = getattr(exc, "context_mark", None)
    ended = getattr(exc, "problem_mark", None)
    what = _OPENERS.get(str(context))
    if what is None or opened is None or ended is None:
        return None
    if text[ended.index :].strip() and "end of stream" not in str(getattr(exc, "problem", "")):
        return None  # stopped before the end: the problem mark is the better place
    return YamlError(
        f"invalid YAML: {what} opened here is never closed", opened.line + 1, opened.column + 1
    )


def _position(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed file: its values, and the node tree that knows where each came from."""

    data: Any
    root: Node | None
    size: int = 0
    """Values in the document, each use of an alias counted as a copy of what it names."""
    lines: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """The line of each item of each top-level list, by its key (what a loader places
    most often; it lets the node tree go: :meth:`without_nodes`)."""

    def without_nodes(self) -> Document:
        """The document without its node tree (most of its memory); what :attr:`lines`
        says stays, anything else is located by parsing the bytes again."""
        return replace(self, root=None)

    def locate(self, path: KeyPath) -> tuple[int, int] | None:
        return locate(self.root, path)


def _check_utf8(data: bytes) -> None:
    """Refuse bytes that are not UTF-8, without decoding them whole (no copy of a big file)."""
    if data.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), _UTF8_CHUNK):
        end = start + _UTF8_CHUNK
        try:
            decoder.decode(view[start:end], final=end >= len(data))
        except UnicodeDecodeError:
            pass
        else:
            continue
        try:  # again from the start, for the exact position (the error path only)
            codecs.utf_8_decode(view[:end], "strict", True)
        except UnicodeDecodeError as exc:
            bad_line = data.count(b"\n", 0, exc.start) + 1
            raise YamlError(f"not valid UTF-8 ({exc.reason})", bad_line, None) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, column


def parse(data: bytes | str, budget: int | None = None) -> Document:
    """Parse one YAML document into str/None/list/dict values (and positions).

    Raises :class:`YamlError` with a position for anything malformed, including
    a stream of several documents and text that is not UTF-8, and
    :class:`NodeLimitError` when the document holds more than ``budget`` values
    (each use of an alias counted as a copy); composition stops there.
    Bytes are handed to the parser as they are (a big file is not copied).
    """
    limit = DEFAULT_LIMITS.max_yaml_nodes if budget is None else budget
    stream: str | bytes
    if isinstance(data, bytes):
        _check_utf8(data)
        stream = data  # libyaml reads (and skips) a UTF-8 BOM itself
    else:
        stream = data.removeprefix("\ufeff")
    loader = _loader_for(stream, limit)
    try:
        root: Node | None = loader.get_single_node()
        if root is None:
            return Document(None, None, 0)
        builder = _Builder(limit)
        value = builder.build(root)
        return Document(value, root, builder.size[id(root)], _item_lines(root))
    except YamlError:
        raise
    except _OverBudget as exc:
        raise NodeLimitError(
            f"too many values: more than {limit:,} (reading stopped here)", exc.line, exc.column
        ) from None
    except yaml.reader.ReaderError as exc:
        if isinstance(data, bytes):
            line, column = _byte_position(data, exc.position)
        else:
            line, column = _position(data, exc.position)
        shown = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise YamlError(f"invalid YAML: unacceptable character {shown}", line, column) from exc
    except yaml.YAMLError as exc:
        # the error path only: decoding a (capped) file here costs nothing on success
        text = stream if isinstance(stream, str) else stream.decode("utf-8")
        unclosed = _unclosed(exc, text.removeprefix("\ufeff"))
        if unclosed is not None:
            raise unclosed from exc
        where = _mark_of(exc)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{context}, {problem}" if context else str(problem)
        opened = getattr(exc, "context_mark", None)
        if str(context) in _OPENERS and opened is not None:
            # reported where the parser stopped; the mistake is often where it opened
            what = _OPENERS[str(context)]
            message += f" ({what} opened at {opened.line + 1}:{opened.column + 1})"
        raise YamlError(f"invalid YAML: {message}", *where) from exc
    except RecursionError as exc:
        raise YamlError("the document nests too deeply", None, None) from exc
    finally:
        loader.dispose()


def _entries(node: MappingNode) -> list[tuple[Node, Node]]:
    """Key/value pairs of a mapping, merged (``<<``) entries first, as YAML 1.1 does."""
    merged: list[tuple[Node, Node]] = []
    own: list[tuple[Node, Node]] = []
    for key, value in node.value:
        if key.tag == _MERGE:
            sources = value.value if isinstance(value, SequenceNode) else [value]
            # earlier mappings in a merge list win: put them last for the reversed search
            for source in reversed(sources):
                if isinstance(source, MappingNode):
                    merged.extend(_entries(source))
        else:
            own.append((key, value))
    return merged + own


def _item_lines(root: Node) -> dict[str, tuple[int, ...]]:
    if not isinstance(root, MappingNode):
        return {}
    found: dict[str, tuple[int, ...]] = {}
    for name, value in _entries(root):  # later entries win, as in locate()
        if isinstance(name, ScalarNode) and isinstance(value, SequenceNode):
            found[name.value] = tuple(item.start_mark.line + 1 for item in value.value)
        elif isinstance(name, ScalarNode):
            found.pop(name.value, None)
    return found


def item_lines(root: Node | None, key: str) -> list[int] | None:
    """The line (1-based) of each item of the list under the top-level ``key``, or None
    when there is no such list: :func:`locate` of ``(key, i)`` for every ``i`` at once."""
    if not isinstance(root, MappingNode):
        return None
    for name, value in reversed(_entries(root)):
        if isinstance(name, ScalarNode) and name.value == key:
            if isinstance(value, SequenceNode):
                return [item.start_mark.line + 1 for item in value.value]
            return None
    return None


def locate(root: Node | None, path: KeyPath) -> tuple[int, int] | None:
    """Line and column (1-based) of the deepest node along ``path``.

    For a mapping entry that is the position of its key; for a list item, of
    the item.  When the path goes further than the document, the position of
    the deepest node that exists is returned.
    """
    if root is None:
        return None
    node: Node = root
    mark = node.start_mark
    for part in path:
        found: Node | None = None
        if isinstance(node, MappingNode) and isinstance(part, str):
            for key, value in reversed(_entries(node)):
                if isinstance(key, ScalarNode) and key.value == part:
                    mark = key.start_mark
                    found = value
                    break
        elif isinstance(node, SequenceNode) and isinstance(part, int):
            if 0 <= part < len(node.value):
                found = node.value[part]
                mark = found.start_mark
        if found is None:
            break
        node = found
    return mark.line + 1, mark.column + 1
