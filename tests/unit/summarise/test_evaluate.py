"""Evaluation's inputs at their edges: the split's rejects named by another spelling of the
path, a reject without a line, how many set-aside records the log names, stored summaries
all set aside. (test_stage covers the join by id and by position, and stored scoring.)"""

from __future__ import annotations

import json
import logging

import pytest

from shardflow.corpus.readers import Rejected
from shardflow.summarise.evaluate import log_rejects, score_stored, source_key, split_rejected_lines
from shardflow.summarise.params import ScoreParams


def outputs(folder) -> dict:
    return {k: str(folder / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}


def test_the_splits_rejects_match_a_source_however_its_path_is_spelled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "src.jsonl").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "data")
    rejects = tmp_path / "rejects.jsonl"
    rows = [{"source": "data/src.jsonl", "line": 4}, {"source": "./data/src.jsonl", "line": 9},
            {"source": "data/src.jsonl", "line": None}]  # a Parquet reject: no line to pass over
    rejects.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = split_rejected_lines(str(rejects))
    assert lines == {source_key(str(tmp_path / "link" / "src.jsonl")): frozenset({4, 9})}
    assert split_rejected_lines(None) == {}


def test_the_log_names_the_first_twenty_set_aside_and_counts_the_rest(caplog):
    rejects = [Rejected("src.jsonl", i, "missing field 'highlights'", "") for i in range(1, 26)]
    with caplog.at_level(logging.WARNING):
        log_rejects(rejects, "reference")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 21 and messages[19].startswith("reference set aside: src.jsonl:20: ")
    assert messages[20] == "... and 5 more references set aside"


def test_stored_scoring_with_every_record_set_aside_names_the_sources(tmp_path):
    src = tmp_path / "src.jsonl"
    src.write_text(json.dumps({"id": "a", "highlights": "h", "summary": None}) + "\n")
    with pytest.raises(ValueError, match=rf"no record with summaries 'summary' and references in {src}"):
        score_stored([str(src)], "summary", ScoreParams(on_bad_record="skip"), outputs(tmp_path))
    assert not (tmp_path / "m.json").exists()


def test_a_damaged_line_of_the_splits_rejects_names_the_file_and_line(tmp_path):
    rejects = tmp_path / "rejects.jsonl"
    rejects.write_text(json.dumps({"source": "a.jsonl", "line": 3, "reason": "empty text"}) + '\n{"source": "a.js\n')
    with pytest.raises(ValueError, match=rf"^{rejects}:2: "):
        split_rejected_lines(str(rejects))
