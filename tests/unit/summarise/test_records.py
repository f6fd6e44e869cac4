"""The summaries file at its edges: text that holds line breaks other than LF, right-to-left
text and combining marks, ids that are not strings. (test_stage covers missing fields,
bad UTF-8 and a null id.)"""

from __future__ import annotations

import json
import re

import pytest

from shardflow.summarise.records import SummariesError, iter_summaries, write_summaries

REC = {"summary": "s", "input_tokens": 3, "output_tokens": 1, "truncated": False}


def test_any_text_is_one_line_and_reads_back_as_written(tmp_path):
    texts = [
        "First sentence.\nSecond one.",  # extractive summaries: one sentence a line
        "line\u2028separator, next\u0085line, carriage\rreturn",  # str.splitlines would cut these
        "\u05e9\u05dc\u05d5\u05dd \u200f\u0645\u0631\u062d\u0628\u0627",  # right to left, with a mark
        "Cafe\u0301 \U0001f600",  # a combining mark, an astral character
    ]
    path = tmp_path / "s.jsonl"
    write_summaries(path, ["a", "b", "c", "d"], [dict(REC, summary=t) for t in texts])
    assert path.read_bytes().count(b"\n") == len(texts)
    assert [(r["id"], r["summary"]) for r in iter_summaries(path)] == list(zip("abcd", texts, strict=True))


def test_ids_and_records_of_different_lengths_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="2 ids but 1 summaries"):
        write_summaries(tmp_path / "s.jsonl", ["a", "b"], [REC])
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("value", [5, True, ["a"]])
def test_an_id_that_is_not_a_string_names_the_file_and_line(tmp_path, value):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"id": "a", **REC}) + "\n" + json.dumps({"id": value, **REC}) + "\n")
    with pytest.raises(SummariesError, match=rf"s.jsonl:2: id is {re.escape(json.dumps(value))}, not a string"):
        list(iter_summaries(path))


@pytest.mark.parametrize(
    "field, value, reason",
    [("summary", None, "summary is null, not a string"),
     ("summary", ["The cat sat."], 'summary is ["The cat sat."], not a string'),
     ("summary", ["x" * 60], 'summary is ["' + "x" * 37 + '\u2026, not a string'),  # a long value, cut
     ("input_tokens", 3.9, "input_tokens is 3.9, not an integer"),
     ("output_tokens", "2", 'output_tokens is "2", not an integer'),
     ("output_tokens", True, "output_tokens is true, not an integer"),
     ("truncated", 0, "truncated is 0, not true or false")],
)
def test_a_field_of_the_wrong_type_names_the_file_and_line(tmp_path, field, value, reason):
    """A null summary stopped the evaluation with a bare TypeError, a list was read as
    sentences, and the report read 3.9 tokens as 3: none named the file or line."""
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"id": "a", **REC}) + "\n" + json.dumps({"id": "b", **dict(REC, **{field: value})}) + "\n")
    with pytest.raises(SummariesError, match=rf"s.jsonl:2: {re.escape(reason)}$"):
        list(iter_summaries(path))
