"""Loading YAML configuration files safely: limits on size, nesting and alias expansion, no
duplicate keys, and errors that name the file and line.

``yaml.safe_load`` only builds plain Python objects (no code runs), but it still lets a file:

* repeat a key, silently keeping the last value (``batch_size: 16`` ... ``batch_size: 256``);
* expand aliases exponentially ("billion laughs": nine levels of nine aliases are 9^9 =
  387,420,489 strings; loading is fast because the objects are shared, but whatever walks or
  prints the result, e.g. a validation error message, then runs for minutes);
* nest thousands of levels deep (``[[[[...]]]]``), which ends in a RecursionError;
* be arbitrarily large, or hold a number with more digits than Python converts (ValueError).

:class:`LimitedSafeLoader` (a :class:`yaml.SafeLoader` subclass, so only the standard YAML
tags are constructed) refuses each of these while it composes the document, before anything
is built from it, and :func:`load_yaml` / :func:`load_yaml_file` turn every failure into a
:class:`YamlError` (a :class:`~dlperf.errors.ConfigError`) of the form
``FILE:LINE:COLUMN: what is wrong``, never longer than a few hundred characters: the message
never prints the document or its expansion. The limits and why each value:

* :data:`MAX_YAML_BYTES` = 1 MiB: dlperf's sweep files are 1-3 KB; a grid file describes its
  points by crossing lists, so even a 10^6-point sweep fits in a few lines.
* :data:`MAX_DEPTH` = 64 levels of nested collections: a sweep file nests 4 (grid, entry,
  iterations, a list); far below Python's recursion limit (1000 frames; the composer takes
  about 3 per level).
* :data:`MAX_ALIAS_NODES` = 10,000 and :data:`MAX_ALIAS_CHARS` = 1 MiB: the nodes and scalar
  characters that alias references may add to the document when expanded (an alias counts the
  full size of the node it names). Anchors that share an ``iterations`` block between grid
  entries add tens of nodes; the billion-laughs file passes 10,000 on its fifth line. The same
  defence as libyaml-based and Go YAML parsers (go-yaml v2.2.4+ caps alias expansion by a
  ratio of the document; CVE-2019-11253 was this attack on Kubernetes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from dlperf.errors import ConfigError, DlperfError, with_article

__all__ = [
    "MAX_ALIAS_CHARS",
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_YAML_BYTES",
    "LimitedSafeLoader",
    "YamlError",
    "load_yaml",
    "load_yaml_file",
]

MAX_YAML_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_ALIAS_NODES = 10_000
MAX_ALIAS_CHARS = 1 << 20

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_PROBLEM_CHARS = 200


class YamlError(ConfigError):
    """A YAML file that cannot be loaded; ``path`` and ``line`` (1-based, None if unknown) say
    where. The message is ``PATH:LINE:COLUMN: problem``."""

    def __init__(self, message: str, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path, self.line = path, line


def _where(name: str, mark: Any) -> str:
    if mark is None:
        return name
    return f"{name}:{mark.line + 1}:{mark.column + 1}"


def _short(text: Any) -> str:
    s = str(text)
    return s if len(s) <= _MAX_PROBLEM_CHARS else s[:_MAX_PROBLEM_CHARS] + "..."


class _Refused(yaml.MarkedYAMLError):
    """A limit or rule of :class:`LimitedSafeLoader` broken at ``problem_mark``."""


class LimitedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with limits (see the module docstring) and no duplicate keys.

    Args:
        stream: the document (``str``; the size limit is applied by :func:`load_yaml`).
        max_depth: nested collections allowed.
        max_alias_nodes, max_alias_chars: nodes and scalar characters that alias expansion may
            add.

    Raises (from ``get_single_data``), all :class:`yaml.MarkedYAMLError` with the position:
    nesting deeper than ``max_depth``; alias expansion over a budget; a recursive alias (an
    anchor used inside itself, infinite when expanded); a key that appears twice in one
    mapping (merge keys ``<<`` may be overridden, as YAML defines); a value Python cannot
    convert (e.g. an integer of more than 4,300 digits).
    """

    def __init__(self, stream: str, *, max_depth: int = MAX_DEPTH,
                 max_alias_nodes: int = MAX_ALIAS_NODES,
                 max_alias_chars: int = MAX_ALIAS_CHARS) -> None:
        super().__init__(stream)
        self.max_depth, self.max_alias_nodes, self.max_alias_chars = (
            max_depth, max_alias_nodes, max_alias_chars)
        self._depth = 0
        self._alias_nodes = self._alias_chars = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, chars) expanded

    # --- composing: depth and alias budgets ----------------------------------------------------

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise _Refused(None, None, f"alias *{self.peek_anchor(node)} is used inside the "
                               f"node it names (a recursive alias is infinite when expanded)",
                               mark)
            self._alias_nodes += size[0]
            self._alias_chars += size[1]
            if self._alias_nodes > self.max_alias_nodes or \
                    self._alias_chars > self.max_alias_chars:
                raise _Refused(None, None, f"aliases expand the document by more than "
                               f"{self.max_alias_nodes:,} nodes or {self.max_alias_chars:,} "
                               f"characters (a 'billion laughs' alias bomb?); write the "
                               f"values out or use fewer aliases", mark)
            return node
        level = 1 if self.check_event(SequenceStartEvent, MappingStartEvent) else 0
        self._depth += level
        if self._depth > self.max_depth:
            raise _Refused(None, None, f"collections nested more than {self.max_depth} levels "
                           f"deep", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= level
        self._sizes[id(node)] = self._size_of(node)
        return node

    def _size_of(self, node: Any) -> tuple[int, int]:
        if isinstance(node, ScalarNode):
            return 1, len(node.value)
        children = (node.value if isinstance(node, SequenceNode)
                    else [c for kv in node.value for c in kv])
        nodes, chars = 1, 0
        for c in children:
            n, ch = self._sizes.get(id(c), (1, 0))
            nodes, chars = nodes + n, chars + ch
        return nodes, chars

    def peek_anchor(self, node: Any) -> str:
        for name, n in self.anchors.items():
            if n is node:
                return name
        return "?"

    # --- constructing: duplicate keys, conversion errors ---------------------------------------

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            self._check_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def _check_duplicates(self, node: MappingNode) -> None:
        seen: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for m in (value_node.value if isinstance(value_node, SequenceNode)
                          else [value_node]):
                    if isinstance(m, MappingNode):
                        self._check_duplicates(m)
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # unhashable: SafeConstructor refuses it with its own message
            if first is not key_node:
                shown = _short(repr(key))
                if isinstance(key_node, ScalarNode) and key_node.value != key:
                    shown = f"{_short(repr(key_node.value))} (read as {shown})"
                raise _Refused(None, None,
                               f"duplicate key {shown} (first at line "
                               f"{first.start_mark.line + 1}, in the mapping that starts at line "
                               f"{node.start_mark.line + 1}); YAML keeps only the last value: "
                               f"remove one of them", key_node.start_mark)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, DlperfError):
            raise
        except (ValueError, OverflowError, TypeError, RecursionError) as e:
            raise _Refused(None, None, f"cannot read this value: {_short(e)}",
                           node.start_mark) from None


def load_yaml(text: str | bytes, name: str = "<string>", *, max_bytes: int = MAX_YAML_BYTES,
              max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES,
              max_alias_chars: int = MAX_ALIAS_CHARS, expect_mapping: bool = False) -> Any:
    """Load one YAML document with :class:`LimitedSafeLoader`.

    Args:
        text: the document; ``bytes`` must be UTF-8.
        name: what error messages call it (a file path).
        max_bytes, max_depth, max_alias_nodes, max_alias_chars: the limits (module docstring).
        expect_mapping: refuse a document that is not a mapping with string keys at the top
            (a configuration file's shape), e.g. an empty file, a list or ``1: x``.

    Returns:
        Plain Python objects (dict, list, str, int, float, bool, None, datetime, bytes, set).

    Raises:
        YamlError: ``NAME[:LINE:COLUMN]: problem``: over ``max_bytes``, not UTF-8, not valid
            YAML (syntax, a tab in indentation, an unknown or Python tag, an undefined or
            duplicate anchor, several documents, a control character such as NUL), or any
            limit or rule of :class:`LimitedSafeLoader`.
    """
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    if size > max_bytes:
        raise _too_big(name, size, max_bytes)
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw[:e.start].count(b"\n") + 1
            raise YamlError(f"{name}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                            f"offset {e.start}: {e.reason}); save the file as UTF-8", name,
                            line) from None
    loader = None
    try:  # the Reader checks for control characters as the loader is made
        loader = LimitedSafeLoader(text, max_depth=max_depth, max_alias_nodes=max_alias_nodes,
                                   max_alias_chars=max_alias_chars)
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        raise _yaml_error(e, name) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise YamlError(f"{name}:{line}: not valid YAML: character U+{e.character:04X} is not "
                        f"allowed (YAML text may not hold control characters such as NUL; "
                        f"is this a binary file?)", name, line) from None
    except yaml.YAMLError as e:
        raise YamlError(f"{name}: not valid YAML: {_short(e)}", name) from None
    except RecursionError:  # pragma: no cover - max_depth keeps far below the limit
        raise YamlError(f"{name}: nested too deeply to read", name) from None
    finally:
        if loader is not None:
            loader.dispose()
    if expect_mapping and not (isinstance(data, dict) and all(isinstance(k, str) for k in data)):
        got = ("an empty document" if data is None else
               "a mapping with a non-text key " + _short(repr(next(k for k in data
                                                                   if not isinstance(k, str))))
               if isinstance(data, dict) else with_article(type(data).__name__))
        raise YamlError(f"{name}: expected a mapping of names to values at the top, got {got}",
                        name, 1)
    return data


def load_yaml_file(path: str | os.PathLike, **limits: Any) -> Any:
    """Read and load the YAML file ``path`` with :func:`load_yaml` (same keyword arguments).

    The size is checked before the file is read (and again on what was read), and only regular
    files are opened (a FIFO would block).

    Raises:
        YamlError: the file cannot be read (missing, a folder, not a regular file) or any error
            of :func:`load_yaml`; the message starts with the path.
    """
    from dlperf.data.files import open_regular
    from dlperf.errors import DataError

    p = str(Path(path))
    max_bytes = limits.get("max_bytes", MAX_YAML_BYTES)
    try:
        with open_regular(p, "YAML file") as fh:
            size = os.fstat(fh.fileno()).st_size
            raw = b"" if size > max_bytes else fh.read(max_bytes + 1)
    except DataError as e:
        raise YamlError(str(e), p) from None
    except OSError as e:
        raise YamlError(f"cannot read YAML file {p}: {e.strerror or e}", p) from None
    if size > max_bytes:
        raise _too_big(p, size, max_bytes)
    return load_yaml(raw, p, **limits)


def _too_big(path: str, size: int, max_bytes: int) -> YamlError:
    return YamlError(f"{path}: {size:,} bytes, more than the {max_bytes:,}-byte limit for a YAML "
                    f"file (dlperf.yamlsafe.MAX_YAML_BYTES); a configuration file this size is "
                    f"not one: check the path", path)


def _yaml_error(e: yaml.MarkedYAMLError, name: str) -> YamlError:
    mark = e.problem_mark or e.context_mark
    problem = _short(e.problem or "")
    context = ""
    if e.context and e.context_mark is not None and e.context_mark is not mark:
        context = f" ({_short(e.context)}, line {e.context_mark.line + 1})"
    elif e.context:
        context = f" ({_short(e.context)})"
    kind = "" if isinstance(e, _Refused) else "not valid YAML: "
    line = mark.line + 1 if mark is not None else None
    return YamlError(f"{_where(name, mark)}: {kind}{problem}{context}", name, line)
