"""Evaluation's inputs at their edges: the split's rejects named by another spelling of the
path, a reject without a line, how many set-aside records the log names, stored summaries
all set aside. (test_stage covers the join by id and by position, and stored scoring.)"""

from __future__ import annotations

import json
import logging

import pytest

from shardflow.core.config import NEUTRAL_ADDED_KEYS, load_schema, read_yaml, validate_config
from shardflow.corpus.readers import DEFAULT_MAX_RECORD_BYTES, BadRecordError, Rejected, record_limit_bytes
from shardflow.summarise.evaluate import (
    evaluate_summaries,
    log_rejects,
    score_stored,
    source_key,
    split_rejected_lines,
)
from shardflow.summarise.params import ScoreParams, score_params
from shardflow.summarise.records import write_summaries
from shardflow.workflow.plan import reader_options
from tests.helpers import REPO


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


def test_scoring_reads_lines_with_the_configured_record_limit(tmp_path):
    """input.max_record_mb reaches the scoring (ScoreParams.max_record_bytes): a line over
    it is a bad record naming file, line and limit, one under it is read. The scoring read
    with a fixed 64 MiB, so a record the split took under a raised limit stopped it."""
    rec = {"article": "x", "highlights": "The council approved the budget.", "summary": "The council met."}
    short = json.dumps(dict(rec, id="a")).encode()
    long = json.dumps(dict(rec, id="b", article="x" * 200)).encode()
    src = tmp_path / "src.jsonl"
    src.write_bytes(short + b"\n" + long + b"\n")
    limit = len(short) + 10
    tight = ScoreParams(max_record_bytes=limit)
    too_large = rf"^{src}:2: record too large: {len(long):,} bytes, over input.max_record_mb \({limit:,} bytes\)$"
    with pytest.raises(BadRecordError, match=too_large):
        score_stored([str(src)], "summary", tight, outputs(tmp_path))
    m = score_stored([str(src)], "summary", ScoreParams(on_bad_record="skip", max_record_bytes=limit), outputs(tmp_path))
    assert (m.metrics["n_documents"], m.metrics["rejected_records"]) == (1, 1)
    assert score_stored([str(src)], "summary", ScoreParams(), outputs(tmp_path)).metrics["n_documents"] == 2
    # evaluate_summaries reads the references with it too
    summaries = tmp_path / "s.jsonl"
    write_summaries(summaries, ["a", "b"], [{"summary": "The council met.", "input_tokens": 9, "output_tokens": 4, "truncated": False}] * 2)
    with pytest.raises(BadRecordError, match=too_large):
        evaluate_summaries(str(summaries), [str(src)], tight, outputs(tmp_path))
    assert evaluate_summaries(str(summaries), [str(src)], ScoreParams(), outputs(tmp_path)).metrics["n_documents"] == 2


def test_score_params_record_input_max_record_mb_only_away_from_its_default():
    """At 64 (the schema's default) the key stays out of the recorded params, as they were
    before it reached the scoring, so an upgrade reruns no finished evaluation
    (core.config.NEUTRAL_ADDED_KEYS); another value is recorded, in the split's bytes."""
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    config = validate_config(read_yaml(REPO / "config" / "config.yaml"), schema)
    assert list(score_params(config)) == [
        "id_field", "reference_field", "reference_format", "summary_format", "resamples", "on_bad_record"
    ]
    neutral = NEUTRAL_ADDED_KEYS[("input", "max_record_mb")]
    assert ScoreParams().max_record_bytes == record_limit_bytes(neutral) == DEFAULT_MAX_RECORD_BYTES
    for value in (64, 64.0):
        config["input"]["max_record_mb"] = value
        assert "max_record_bytes" not in score_params(config)
    config["input"]["max_record_mb"] = 0.5
    assert score_params(config)["max_record_bytes"] == 2**19 == reader_options(config).max_record_bytes
    assert ScoreParams(**score_params(config)).max_record_bytes == 2**19


def test_documents_the_scores_leave_out_are_among_the_warnings(tmp_path, caplog):
    """Under on_bad_record: skip a document without a usable reference, or a record the
    split set aside, is left out of the means; metrics.json counted them, but `make
    evaluate-summaries` prints only `warnings`, which said nothing. A warning now says how
    many are left out and where they are named; the log names the summarised ones."""
    src, rejects = tmp_path / "src.jsonl", tmp_path / "rejects.jsonl"
    docs = [("a", "A b. C d.", "A b."), ("b", "E f.", ""), ("c", "G h.", "G h."), ("d", "I j.", "I j.")]
    src.write_text("".join(json.dumps({"id": i, "article": t, "highlights": h}) + "\n" for i, t, h in docs))
    summaries = tmp_path / "s.jsonl"
    write_summaries(summaries, ["a", "b", "c"],
                    [{"summary": t, "input_tokens": 2, "output_tokens": 2, "truncated": False} for _, t, _ in docs[:3]])
    skip = ScoreParams(on_bad_record="skip")
    with caplog.at_level(logging.WARNING):
        m = evaluate_summaries(str(summaries), [str(src)], skip, outputs(tmp_path)).metrics
    assert (m["n_documents"], m["documents_without_reference"], m["rejected_references"]) == (2, 1, 1)
    (warning,) = m["warnings"]
    assert warning.startswith("the scores leave out 1 of the summarised documents: they have no usable reference")
    assert "the job's log names each, and the reference records set aside (1) with why" in warning
    assert "summarised document 'b' has no usable reference: left out of the scores" in caplog.text
    # The split's rejects: never summarised, listed in its rejects file.
    rejects.write_text(json.dumps({"source": str(src), "line": 4, "reason": "empty text"}) + "\n")
    m = evaluate_summaries(str(summaries), [str(src)], skip, outputs(tmp_path), split_rejects=str(rejects)).metrics
    assert m["split_rejected_records"] == 1
    split, no_reference = m["warnings"]
    assert split.startswith("the scores leave out 1 of the input's records: the split set them aside")
    assert f"{rejects} lists each" in split and no_reference == warning
    # Stored summaries: a record set aside is left out of every system's scores.
    stored = tmp_path / "stored.jsonl"
    stored.write_text("".join(json.dumps({"id": i, "highlights": h, "summary": t}) + "\n" for i, t, h in docs))
    m = score_stored([str(stored)], "summary", skip, outputs(tmp_path)).metrics
    assert m["rejected_records"] == 1
    (warning,) = m["warnings"]
    assert warning.startswith("the scores leave out 1 of the input's records, in every system")
    # None where nothing is left out.
    src.write_text("".join(json.dumps({"id": i, "article": t, "highlights": t}) + "\n" for i, t, _ in docs))
    assert evaluate_summaries(str(summaries), [str(src)], skip, outputs(tmp_path)).metrics["warnings"] == []


def test_evaluation_holds_one_summary_at_a_time(tmp_path, monkeypatch):
    """Each summary is scored, and counted for the warnings, as it is joined with its
    reference. Every summary was held first (a SummaryRecord each, then a row dict each):
    memory that grew with the corpus, which this job reads whole. ROUGE itself is stubbed:
    what the join holds is under test."""
    import tracemalloc

    from shardflow.summarise import rouge

    monkeypatch.setattr(rouge, "score_summary", lambda *args, **kw: dict.fromkeys(rouge.ROUGE_TYPES, 50.0))
    n, long = 50, "rain " * 20_000  # 100 kB each, 5 MB in all
    src, summaries, warm = tmp_path / "src.jsonl", tmp_path / "s.jsonl", tmp_path / "warm.jsonl"
    src.write_text("".join(json.dumps({"id": f"d{i}", "highlights": "Rain fell."}) + "\n" for i in range(n)))
    rec = {"summary": long, "input_tokens": 9, "output_tokens": 4, "truncated": False}
    write_summaries(summaries, [f"d{i}" for i in range(n)], [rec] * n)
    write_summaries(warm, ["d0"], [dict(rec, summary="Rain.")])
    evaluate_summaries(str(warm), [str(src)], ScoreParams(resamples=10), outputs(tmp_path))  # imports, untraced
    tracemalloc.start()
    try:
        m = evaluate_summaries(str(summaries), [str(src)], ScoreParams(resamples=10), outputs(tmp_path)).metrics
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert m["n_documents"] == n and m["rouge1"] == 50.0
    assert peak < 0.7 * n * len(long), peak  # 2.2 MB here, 7 MB when every summary was held
