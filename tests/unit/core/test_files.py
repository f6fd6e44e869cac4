"""shardflow.core.files: gzip by magic bytes; JSON files whose errors name file and line
(a model folder's broken JSON: tests/unit/embed/test_engine.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from shardflow.core.files import iter_json_lines, loads_json, malformed_json, open_binary, read_json


def test_open_binary_gunzips_by_magic_not_name(tmp_path):
    plain, packed = tmp_path / "a.gz", tmp_path / "b.tsv"  # names that lie
    plain.write_bytes(b"x\ty\n")
    packed.write_bytes(gzip.compress(b"x\ty\n"))
    for path in (plain, packed):
        with open_binary(path) as fh:
            assert fh.read() == b"x\ty\n"


def test_read_json_names_file_line_and_column(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2], "b": "é"}', encoding="utf-8")
    assert read_json(good) == {"a": [1, 2], "b": "é"}
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "a": 1,\n  "b": \n}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json:4: malformed JSON \(Expecting value at column 1\)"):
        read_json(bad)


def test_read_json_of_a_file_cut_short_names_its_last_line_and_end(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text('{\n  "a": 1,\n  "b": 2\n\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"cut\.json:3: malformed JSON \(Expecting ',' delimiter at the end of the file\)"):
        read_json(cut)


def test_read_json_of_text_that_is_not_utf8_names_file_line_and_byte(tmp_path):
    # A model's config saved in Latin-1 by an editor: the bytes of "é" are not UTF-8.
    # The error was Python's bare UnicodeDecodeError, naming no file of the folder's five.
    latin1 = tmp_path / "config_sentence_transformers.json"
    head = '{\n  "a": "' + "x" * 20000 + '",\n  "prompts": {"query": "'
    latin1.write_bytes((head + 'requête: "}\n}\n').encode("latin-1"))
    at = len(head.encode()) + len("requ")
    with pytest.raises(ValueError, match=rf"config_sentence_transformers\.json:3: invalid UTF-8 at byte {at} "):
        read_json(latin1)


@pytest.mark.parametrize(
    "line, reason",
    [
        (b'{"id": "d2", "off', r"malformed JSON \(.* at the end of the line\)"),  # cut short
        (b'{"id": "d\xe92"}', r"invalid UTF-8 at byte 9 of the line"),  # Latin-1
        (b'["d2"]', r"JSON value is list, not an object"),
        (b"", r"malformed JSON \(Expecting value at column 1\)"),  # a blank line
    ],
)
def test_iter_json_lines_names_file_and_line_of_a_damaged_line(tmp_path, line, reason):
    # json's and the codec's own errors name neither the file nor the line.
    path = tmp_path / "t.bin.docs.jsonl"
    path.write_bytes(b'{"id": "d1"}\n' + line + b'\n{"id": "d3"}\n')
    lines = iter_json_lines(path)
    assert next(lines) == (1, {"id": "d1"})
    with pytest.raises(ValueError, match=rf"t\.bin\.docs\.jsonl:2: {reason}"):
        next(lines)


def test_loads_json_raises_a_text_nested_too_deeply_as_bad_json_without_a_column():
    """json decodes by recursion and raised a bare RecursionError; as a JSONDecodeError it
    is caught where every bad line is, and named with the line's file and line. Where the
    nesting went too deep is not known, so no column is named."""
    nested = "[" * 100_000 + "]" * 100_000
    with pytest.raises(json.JSONDecodeError) as err:
        loads_json(nested)
    reason = "malformed JSON (arrays or objects nested deeper than Python's recursion limit lets json read)"
    assert malformed_json(err.value) == reason
    assert loads_json("[" * 100 + "]" * 100) == json.loads("[" * 100 + "]" * 100)
    assert loads_json('{"a": 1, "a": 2}', object_pairs_hook=list) == [("a", 1), ("a", 2)]
