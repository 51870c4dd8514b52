"""Tests of cronstable.config.yamlread: YAML read the way yacron's strictyaml reads it.

Every scalar is the text written, the empty plain scalar is None, duplicate keys
are errors, merge keys and aliases work, and everything refused comes back as a
located :class:`YamlError`.  ``locate()`` maps a key path back to a position.
"""

from __future__ import annotations

import pytest

from cronstable.config import yamlread
from cronstable.config.yamlread import (
    MAX_DEPTH,
    DuplicateKeyError,
    NodeLimitError,
    YamlError,
    locate,
    parse,
)


def data(text: str | bytes) -> object:
    return parse(text).data


def error(text: str | bytes) -> YamlError:
    with pytest.raises(YamlError) as info:
        parse(text)
    return info.value


# --------------------------------------------------------------------------
# Scalars are text
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "1.10",
        "12:30",
        "yes",
        "no",
        "on",
        "off",
        "true",
        "False",
        "0",
        "-1",
        "007",
        "0x1F",
        "0o17",
        "1e3",
        "1_000",
        ".inf",
        "-.inf",
        ".nan",
        "2024-01-31",
        "2024-01-31T12:30:00Z",
        "null",
        "Null",
        "~",
        "=",
        "/bin/sh",
        "0 */5 * * mon-fri",
        "a: b",
    ],
)
def test_plain_scalars_are_kept_as_written(written: str) -> None:
    text = f"value: {written}\n" if written != "a: b" else "value: 'a: b'\n"
    assert data(text) == {"value": written}


def test_scalars_in_lists_and_flow_collections_are_text() -> None:
    assert data("a: [1, 2.50, true, yes, ~]\nb: {x: 1.10, y: 12:30}\n") == {
        "a": ["1", "2.50", "true", "yes", "~"],
        "b": {"x": "1.10", "y": "12:30"},
    }


def test_quoted_scalars_are_text_without_quotes() -> None:
    assert data("a: '1.10'\nb: \"yes\"\nc: 'it''s'\nd: \"tab\\there\"\n") == {
        "a": "1.10",
        "b": "yes",
        "c": "it's",
        "d": "tab\there",
    }


@pytest.mark.parametrize(
    "text",
    ["value:\n", "value:    \n", "value: # a comment\n", "{value: }\n", "value: !!null ''\n"],
)
def test_empty_plain_scalar_is_none(text: str) -> None:
    assert data(text) == {"value": None}


def test_empty_list_item_is_none() -> None:
    assert data("- \n- x\n-\n") == [None, "x", None]


@pytest.mark.parametrize("quoted", ["''", '""'])
def test_quoted_empty_scalar_is_empty_text(quoted: str) -> None:
    assert data(f"value: {quoted}\n") == {"value": ""}


def test_block_scalars_keep_their_text() -> None:
    text = "literal: |\n  echo 1\n  echo 2\nfolded: >\n  one\n  two\nkeep: |+\n  x\n\n"
    assert data(text) == {"literal": "echo 1\necho 2\n", "folded": "one two\n", "keep": "x\n\n"}


@pytest.mark.parametrize(
    ("tagged", "value"),
    [
        ("!!str 5", "5"),
        ("!!int 5", "5"),
        ("!!float 1.10", "1.10"),
        ("!!bool yes", "yes"),
        ("!!timestamp 2024-01-31", "2024-01-31"),
        ("!!binary aGVsbG8=", "aGVsbG8="),
        ("!!seq [a]", ["a"]),
        ("!!map {a: b}", {"a": "b"}),
    ],
)
def test_standard_tags_are_accepted_and_still_read_as_text(tagged: str, value: object) -> None:
    assert data(f"value: {tagged}\n") == {"value": value}


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "   \n# x\n"])
def test_empty_document_is_none(text: str) -> None:
    document = parse(text)
    assert document.data is None
    assert document.root is None
    assert document.locate(("jobs",)) is None


def test_document_of_only_a_start_marker_is_none() -> None:
    assert data("---\n") is None


def test_document_may_be_a_list_or_a_scalar() -> None:
    assert data("- a\n- b\n") == ["a", "b"]
    assert data("just text\n") == "just text"


def test_single_document_with_markers() -> None:
    assert data("---\na: 1\n...\n") == {"a": "1"}


def test_str_and_bytes_parse_alike() -> None:
    text = "a: é\nb: [1, 2]\n"
    assert parse(text).data == parse(text.encode("utf-8")).data == {"a": "é", "b": ["1", "2"]}


def test_crlf_line_endings() -> None:
    document = parse(b"a: 1\r\nb: two words\r\n")
    assert document.data == {"a": "1", "b": "two words"}
    assert document.locate(("b",)) == (2, 1)


# --------------------------------------------------------------------------
# Duplicate keys
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("a: 1\na: 2\n", 2, 1, "duplicate key 'a' (first defined on line 1)"),
        ("x:\n  y: 1\n  z: 2\n  y: 3\n", 4, 3, "duplicate key 'y' (first defined on line 2)"),
        ("{a: 1, b: 2, a: 3}\n", 1, 14, "duplicate key 'a' (first defined on line 1)"),
        ("a: 1\n'a': 2\n", 2, 1, "duplicate key 'a' (first defined on line 1)"),
        (
            "jobs:\n  - name: a\n    shell: x\n\n    shell: y\n",
            5,
            5,
            "duplicate key 'shell' (first defined on line 3)",
        ),
    ],
)
def test_duplicate_keys_are_errors_with_both_lines(
    text: str, line: int, column: int, message: str
) -> None:
    exc = error(text)
    assert isinstance(exc, DuplicateKeyError)
    assert (exc.message, exc.line, exc.column) == (message, line, column)


def test_same_key_in_different_mappings_is_fine() -> None:
    assert data("a: {x: 1}\nb: {x: 2}\nc: [{x: 3}, {x: 4}]\n") == {
        "a": {"x": "1"},
        "b": {"x": "2"},
        "c": [{"x": "3"}, {"x": "4"}],
    }


def test_duplicate_key_is_reported_even_with_equal_values() -> None:
    assert isinstance(error("a: 1\na: 1\n"), DuplicateKeyError)


# --------------------------------------------------------------------------
# Anchors, aliases and merge keys
# --------------------------------------------------------------------------


def test_aliases_repeat_scalars_lists_and_mappings() -> None:
    text = "s: &s text\nl: &l [1, 2]\nm: &m {a: 1}\nsa: *s\nla: *l\nma: *m\n"
    assert data(text) == {
        "s": "text",
        "l": ["1", "2"],
        "m": {"a": "1"},
        "sa": "text",
        "la": ["1", "2"],
        "ma": {"a": "1"},
    }


def test_merge_key_with_one_mapping_and_own_keys_winning() -> None:
    text = "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n  z: 4\n"
    assert data(text)["c"] == {"x": "1", "y": "3", "z": "4"}  # type: ignore[index]


def test_own_key_after_merge_is_not_a_duplicate() -> None:
    assert data("b: &b {x: 1}\nc:\n  x: 2\n  <<: *b\n") == {"b": {"x": "1"}, "c": {"x": "2"}}


def test_merge_key_with_a_list_the_first_mapping_wins() -> None:
    text = "a: &a {x: A, p: 1}\nb: &b {x: B, q: 2}\nc:\n  <<: [*a, *b]\n"
    assert data(text)["c"] == {"x": "A", "p": "1", "q": "2"}  # type: ignore[index]


def test_merge_key_with_an_inline_mapping() -> None:
    assert data("c:\n  <<: {x: 1}\n  y: 2\n") == {"c": {"x": "1", "y": "2"}}


def test_merge_in_a_job_list_works_as_in_yacron_examples() -> None:
    text = (
        "common: &common\n  shell: /bin/bash\n  captureStdout: true\n"
        "jobs:\n  - <<: *common\n    name: a\n  - <<: *common\n    name: b\n    shell: /bin/sh\n"
    )
    assert data(text)["jobs"] == [  # type: ignore[index]
        {"shell": "/bin/bash", "captureStdout": "true", "name": "a"},
        {"shell": "/bin/sh", "captureStdout": "true", "name": "b"},
    ]


def test_quoted_merge_key_is_an_ordinary_key() -> None:
    assert data("'<<': x\n") == {"<<": "x"}


@pytest.mark.parametrize("text", ["<<: 1\n", "<<: [a]\n", "a: &a [1]\nb:\n  <<: *a\n"])
def test_merge_key_needs_mappings(text: str) -> None:
    exc = error(text)
    assert exc.message == "a merge key (<<) takes a mapping or a list of them"
    assert exc.line is not None and exc.column is not None


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [("a: &x [*x]\n", 1, 4), ("a: &x {b: *x}\n", 1, 4), ("a:\n  b: &x\n    - c: *x\n", 2, 6)],
)
def test_self_referencing_alias_is_an_error(text: str, line: int, column: int) -> None:
    exc = error(text)
    assert exc.message == "an alias refers to a node that contains it"
    assert (exc.line, exc.column) == (line, column)


def test_undefined_alias_is_an_error() -> None:
    exc = error("a: *nope\n")
    assert exc.message.startswith("invalid YAML:")
    assert "undefined alias" in exc.message
    assert (exc.line, exc.column) == (1, 4)


def test_alias_expansion_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    exc = error("\n".join(lines) + "\n")
    assert "too many values" in exc.message
    assert exc.line is not None


DENSE = [
    "?\n" * 200,
    "? " * 200,
    "{" + "?," * 200 + "}",
    "[" + ",".join(["{?}"] * 100) + "]",
    "[?:]",
    "[?]",
    "{" * 60 + "}" * 60,
    "[a, b, c]",
    "a:\n" * 100,
    "- " * 200,
    "",
]


@pytest.mark.parametrize("text", DENSE, ids=lambda t: repr(t[:12]))
def test_a_document_composes_at_most_a_node_per_byte_and_four(text: str) -> None:
    """What lets a short document be composed without counting its nodes
    (yamlread._SmallLoader): it is used only where the budget is twice this bound."""
    loader = yamlread._NodeLoader(text.encode(), 10**9)  # counts what it composes
    try:
        loader.get_single_node()
    finally:
        loader.dispose()
    assert 0 < loader.count <= len(text.encode()) + 4 or text == ""


@pytest.mark.parametrize("budget", [180, 181, 1001, 1002, 10**6])
def test_the_budget_holds_on_either_side_of_the_short_document_bound(budget: int) -> None:
    """A document of 493 bytes is composed counting its nodes below a budget of 1,002
    and without from there; the builder counts every value either way (each use of an
    alias a copy, so test_alias_expansion_bomb_is_refused_quickly holds uncounted)."""
    text = "a: [" + ", ".join(["x"] * 150) + "]\nb: &b [y, y, y, y]\nc: [*b, *b, *b, *b]\n"
    assert len(text) == 493
    if budget < 181:
        with pytest.raises(NodeLimitError):
            parse(text.encode(), budget)
    else:
        assert parse(text.encode(), budget).size == 181


# --------------------------------------------------------------------------
# Refused documents
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("a: !foo x\n", "!foo"),
        ("a: !!python/object/apply:os.system ['ls']\n", "python/object/apply:os.system"),
        ("a: !!set {x, y}\n", "tag:yaml.org,2002:set"),
        ("a: !!omap [{x: 1}]\n", "tag:yaml.org,2002:omap"),
        ("a: !<tag:example.com,2024:thing> x\n", "tag:example.com,2024:thing"),
    ],
)
def test_unsupported_tags_are_errors(text: str, tag: str) -> None:
    exc = error(text)
    assert exc.message.startswith("unsupported tag ")
    assert tag in exc.message
    assert (exc.line, exc.column) == (1, 4)


def test_unsupported_tag_deep_inside_is_located() -> None:
    exc = error("jobs:\n  - name: a\n    command: !env HOME\n")
    assert (exc.line, exc.column) == (3, 14)


@pytest.mark.parametrize(
    ("raw", "line", "reason"),
    [
        (b"a: \xff\n", 1, "invalid start byte"),
        (b"a: 1\nb: 2\nc: \xc3\x28\n", 3, "invalid continuation byte"),
        (b"a: 1\n\nb: caf\xe9\n", 3, None),
    ],
)
def test_invalid_utf8_is_an_error_with_its_line(raw: bytes, line: int, reason: str | None) -> None:
    exc = error(raw)
    assert exc.message.startswith("not valid UTF-8")
    if reason:
        assert reason in exc.message
    assert exc.line == line
    assert exc.column is None


@pytest.mark.parametrize(
    ("text", "line"),
    [("a: 1\n---\nb: 2\n", 2), ("---\na: 1\n---\n", 3), ("a: 1\n...\n---\nb: 2\n", 3)],
)
def test_several_documents_are_an_error(text: str, line: int) -> None:
    exc = error(text)
    assert exc.message.startswith("invalid YAML:")
    assert "single document" in exc.message
    assert exc.line == line


@pytest.mark.parametrize("text", ["\ufeffa: 1\nb: 2\n", b"\xef\xbb\xbfa: 1\nb: 2\n"])
def test_byte_order_mark_is_skipped(text: str | bytes) -> None:
    document = parse(text)
    assert document.data == {"a": "1", "b": "2"}
    assert document.locate(("a",)) == (1, 1)
    assert document.locate(("b",)) == (2, 1)


@pytest.mark.parametrize(
    "text",
    [
        "a: [1\n",
        "a: {b: c\n",
        "a: 'unterminated\n",
        "a: b\n c: d\n",
        "a:\n\t- tab\n",
        "- a\nb: c\n",
        "a: %\n",
        "key: value: other\n",
    ],
)
def test_malformed_yaml_is_a_located_error(text: str) -> None:
    exc = error(text)
    assert exc.message.startswith("invalid YAML: ")
    assert exc.line is not None and exc.line >= 1
    assert exc.column is not None and exc.column >= 1


@pytest.mark.parametrize("text", ["a: \x00\n", "a: 1\nb: \x07x\n", "a: \x7f\n", "a: \ufffe\n"])
def test_control_characters_are_a_located_one_line_error(text: str) -> None:
    exc = error(text)
    assert exc.message.startswith("invalid YAML: ")
    assert "\n" not in exc.message
    assert exc.line is not None and exc.column is not None


def test_malformed_yaml_location_is_exact() -> None:
    exc = error("a: 1\nb: [x, y\nc: 3\n")
    assert (
        exc.message
        == "invalid YAML: while parsing a flow sequence, did not find expected ',' or ']' "
        "(the '[' opened at 2:4)"
    )
    assert (exc.line, exc.column) == (3, 2)


def test_non_scalar_mapping_keys_are_errors() -> None:
    exc = error("? [a, b]\n: 1\n")
    assert exc.message == "mapping keys must be plain text"
    assert (exc.line, exc.column) == (1, 3)
    assert error("? {a: b}\n: 1\n").message == "mapping keys must be plain text"


@pytest.mark.parametrize("text", ["[" * 3000 + "]" * 3000, "a: " + "{b: " * 3000 + "}" * 3000])
def test_absurd_nesting_is_an_error_not_a_crash(text: str) -> None:
    assert isinstance(error(text), YamlError)


def test_block_nesting_deeper_than_python_allows_is_an_error() -> None:
    text = "".join(" " * i + "a:\n" for i in range(990))
    assert isinstance(error(text), YamlError)


def test_block_nesting_past_the_cap_is_located_where_it_goes_too_deep() -> None:
    text = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5))
    exc = error(text)
    assert exc.message == f"nests too deeply below here (more than {MAX_DEPTH} levels)"
    # the value of k100 (the mapping starting at k101 on line 102) is one level too deep
    assert (exc.line, exc.column) == (MAX_DEPTH + 2, MAX_DEPTH + 2)
    assert exc.key == ("k0", "k1", "k2")


def test_nesting_up_to_the_cap_is_accepted() -> None:
    above = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH - 1)) + " " * (MAX_DEPTH - 1)
    assert isinstance(data(above + "last: x\n"), dict)
    assert error(above + "last: {one: more}\n").line == MAX_DEPTH


def test_nesting_built_up_through_aliases_is_capped_too() -> None:
    # each anchor is shallow, but every alias puts a whole chain below the next one
    half = MAX_DEPTH // 2 + 1
    text = "a: &a " + "[" * half + "]" * half + "\nb: " + "[" * half + "*a" + "]" * half + "\n"
    exc = error(text)
    assert exc.message.startswith("nests too deeply")
    assert exc.line == 2


@pytest.mark.parametrize(
    ("text", "opened", "what"),
    [
        ('jobs:\n  - name: a\n    command: "echo hi\n  - name: b\n', (3, 14), "quote"),
        ("a: 1\nb: 'it\nc: 2\n\n", (2, 4), "quote"),
        ("a: [1, 2\n", (1, 4), "'['"),
        ("a: {x: 1\n\n", (1, 4), "'{'"),
        ("\ufeffa: 'x\n", (1, 4), "quote"),
    ],
)
def test_an_unclosed_quote_or_bracket_is_reported_where_it_opens(
    text: str, opened: tuple[int, int], what: str
) -> None:
    exc = error(text)
    assert exc.message == f"invalid YAML: the {what} opened here is never closed"
    assert (exc.line, exc.column) == opened


@pytest.mark.parametrize(
    ("text", "found", "opened"),
    [
        ("jobs:\n  - {name: a, command: x\n  - name: b\n", (3, 9), "the '{' opened at 2:5"),
        ("a: [1, 2\nb: 3\n", (2, 2), "the '[' opened at 1:4"),
    ],
)
def test_a_bracket_closed_too_late_names_where_it_opens(
    text: str, found: tuple[int, int], opened: str
) -> None:
    # the parser stops mid-file, where it noticed; the mistake is usually where the
    # bracket opens, so the message says where that is
    exc = error(text)
    assert (exc.line, exc.column) == found
    assert exc.message.endswith(f" ({opened})"), exc.message


def test_yaml_error_is_an_exception_with_message() -> None:
    exc = error("a: 1\na: 2\n")
    assert str(exc) == exc.message
    assert isinstance(exc, Exception)


# --------------------------------------------------------------------------
# locate()
# --------------------------------------------------------------------------

JOBS = """\
jobs:
  - name: a
    command: echo
    schedule: '* * * * *'
  - name: b
    environment:
      - key: K
        value: v
    onFailure:
      retry: {maximumRetries: 3, initialDelay: 2}
"""


@pytest.mark.parametrize(
    ("path", "position"),
    [
        ((), (1, 1)),
        (("jobs",), (1, 1)),
        (("jobs", 0), (2, 5)),
        (("jobs", 0, "name"), (2, 5)),
        (("jobs", 0, "schedule"), (4, 5)),
        (("jobs", 1), (5, 5)),
        (("jobs", 1, "environment"), (6, 5)),
        (("jobs", 1, "environment", 0), (7, 9)),
        (("jobs", 1, "environment", 0, "value"), (8, 9)),
        (("jobs", 1, "onFailure", "retry"), (10, 7)),
        (("jobs", 1, "onFailure", "retry", "initialDelay"), (10, 34)),
    ],
)
def test_locate_mapping_keys_and_list_items(path: tuple[str | int, ...], position: object) -> None:
    assert parse(JOBS).locate(path) == position


@pytest.mark.parametrize(
    ("path", "position"),
    [
        (("nope",), (1, 1)),
        (("jobs", 9), (1, 1)),
        (("jobs", -1), (1, 1)),
        (("jobs", 0, "missing"), (2, 5)),
        (("jobs", 1, "environment", 3), (6, 5)),
        (("jobs", 0, "name", "deeper"), (2, 5)),
        (("jobs", "name"), (1, 1)),
        (("jobs", 0, 0), (2, 5)),
    ],
)
def test_locate_stops_at_the_deepest_node_that_exists(
    path: tuple[str | int, ...], position: object
) -> None:
    assert parse(JOBS).locate(path) == position


def test_locate_function_and_method_agree() -> None:
    document = parse(JOBS)
    assert locate(document.root, ("jobs", 1, "environment", 0)) == (7, 9)
    assert locate(None, ("jobs",)) is None


def test_locate_in_flow_style() -> None:
    document = parse('{jobs: [{name: a, schedule: "* * * * *"}, {name: b}]}\n')
    assert document.locate(("jobs", 0, "schedule")) == (1, 19)
    assert document.locate(("jobs", 1)) == (1, 43)


def test_locate_a_key_coming_from_a_merge() -> None:
    text = "base: &b\n  shell: /bin/bash\n  user: x\njob:\n  <<: *b\n  name: a\n"
    document = parse(text)
    assert document.locate(("job", "name")) == (6, 3)
    assert document.locate(("job", "shell")) == (2, 3)


def test_locate_prefers_the_own_key_over_a_merged_one() -> None:
    text = "base: &b\n  shell: /bin/bash\njob:\n  <<: *b\n  shell: /bin/sh\n"
    assert parse(text).locate(("job", "shell")) == (5, 3)


def test_locate_with_a_merge_list_points_at_the_mapping_whose_value_is_used() -> None:
    text = "a: &a {x: A}\nb: &b {x: B}\nc:\n  <<: [*a, *b]\n"
    document = parse(text)
    assert document.data["c"] == {"x": "A"}  # type: ignore[index]
    assert document.locate(("c", "x")) == (1, 8)  # the `x` of &a, whose value is used
