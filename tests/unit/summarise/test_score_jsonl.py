"""Scoring stored summaries from JSONL(.gz): field specs, and every bad input named by file:line."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from shardflow.summarise.data import BadRecordError, load_documents
from shardflow.summarise.params import ScoreParams
from shardflow.summarise.rouge import score_jsonl


def _rec(i, **kw):
    rec = {
        "id": f"d{i}",
        "article": "The cat sat. It was happy.",
        "highlights": "the cat sat .",
        "summary": "the cat sat",
        "system_summaries": {"x": "the cat", "y": "a dog"},
    }
    rec.update(kw)
    return rec


def test_field_dotted_path_and_all_systems(tmp_path, write_jsonl):
    path = str(write_jsonl(tmp_path / "s.jsonl.gz", [_rec(1), _rec(2)]))
    one = score_jsonl(path, "summary").scores
    assert list(one["system"]) == ["summary", "summary"] and (one["rouge1"] == 100.0).all()
    dotted = score_jsonl(path, "system_summaries.x").scores
    assert list(dotted["system"]) == ["x", "x"]
    assert dotted["rouge1"].iloc[0] == pytest.approx(100 * 2 * 1 * (2 / 3) / (1 + 2 / 3))
    both = score_jsonl(path, "system_summaries.*").scores
    assert list(zip(both["id"], both["system"], strict=True)) == [("d1", "x"), ("d1", "y"), ("d2", "x"), ("d2", "y")]
    assert (both[both["system"] == "y"]["rouge1"] == 0.0).all()


def test_configurable_field_names(tmp_path, write_jsonl):
    path = str(write_jsonl(tmp_path / "s.jsonl", [{"doc": 7, "gold": "a b", "out": {"m": "a b"}}]))
    scores = score_jsonl(path, "out.m", ScoreParams(id_field="doc", reference_field="gold")).scores
    assert list(scores["id"]) == ["7"] and scores["rouge2"].iloc[0] == 100.0
    docs = load_documents(path, id_field="doc", article_field="gold", reference_field=None).records
    assert [(d.id, d.article, d.reference) for d in docs] == [("7", "a b", None)]


BAD_LINES = [
    (b'{"id": "d2", "highlights": "x"}', "missing field 'summary'"),
    (b'{"id": "d2", "highlights": "  ", "summary": "x"}', "empty text in field 'highlights'"),
    (b'{"id": "d2", "highlights": "x", "summary": 3}', "field 'summary' is int, not a string"),
    (b'{"id": "d2", "highlights": "\xff", "summary": "x"}', "invalid UTF-8 at byte"),
    (b'["not", "an", "object"]', "JSON value is list, not an object"),
    (b'{"id": "d2", ', "malformed JSON"),
    (b'{"highlights": "x", "summary": "x"}', "missing field 'id'"),
    (b'{"id": "d1", "highlights": "x", "summary": "x"}', "duplicate id 'd1' (first on line 1)"),
]


@pytest.mark.parametrize("line, reason", BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_bad_record_names_file_and_line(tmp_path, line, reason):
    path = tmp_path / "bad.jsonl"
    good = b'{"id": "d1", "highlights": "a b", "summary": "a b"}'
    path.write_bytes(good + b"\n\n" + line + b"\n")  # the blank line 2 carries no record
    with pytest.raises(BadRecordError) as err:
        score_jsonl(str(path), "summary")
    assert str(err.value).startswith(f"{path}:3: ") and reason in str(err.value)

    skipped = score_jsonl(str(path), "summary", ScoreParams(on_bad_record="skip"))
    assert list(skipped.scores["id"]) == ["d1"]
    assert [(r.line, r.reason) for r in skipped.rejects] == [(3, str(err.value).split(": ", 1)[1])]


def test_an_empty_stored_summary_scores_zero_and_counts_in_the_means(tmp_path, write_jsonl):
    """rouge-score scores a summary without a token 0 (and the workflow's own empty
    summaries score so): a system that wrote nothing for a document is scored on it. As a
    bad record it stopped the scoring, or, skipped, took the document out of every
    system's mean, raising the mean of the system that failed on it."""
    recs = [_rec(1), _rec(2, summary="", system_summaries={"x": "  ", "y": "the cat sat"})]
    path = str(write_jsonl(tmp_path / "s.jsonl", recs))
    one = score_jsonl(path, "summary")
    assert not one.rejects and list(one.scores["id"]) == ["d1", "d2"]
    assert one.scores.iloc[1][["rouge1", "rouge2", "rougeL", "rougeLsum"]].tolist() == [0.0] * 4
    both = score_jsonl(path, "system_summaries.*").scores.set_index(["id", "system"])
    assert both.loc[("d2", "x"), "rouge1"] == 0.0 and both.loc[("d2", "y"), "rouge1"] == 100.0
    # rouge-score gives LCS scores without a token as the int 0: a system that wrote
    # nothing at all still has float columns in per_document.parquet.
    empty = str(write_jsonl(tmp_path / "e.jsonl", [_rec(1, summary=""), _rec(2, summary=" ")]))
    assert (score_jsonl(empty, "summary").scores[["rouge1", "rouge2", "rougeL", "rougeLsum"]].dtypes == "float64").all()


def test_systems_must_agree_across_records(tmp_path, write_jsonl):
    recs = [_rec(1), _rec(2, system_summaries={"x": "a"}), _rec(3, system_summaries={"x": "a", "y": "b", "z": "c"})]
    path = str(write_jsonl(tmp_path / "s.jsonl", recs))
    with pytest.raises(BadRecordError, match=r"s.jsonl:2: systems in 'system_summaries' .* missing \['y'\], extra \[\]"):
        score_jsonl(path, "system_summaries.*")
    res = score_jsonl(path, "system_summaries.*", ScoreParams(on_bad_record="skip"))
    assert [r.line for r in res.rejects] == [2, 3] and set(res.scores["id"]) == {"d1"}


def test_the_systems_are_those_most_records_hold_so_a_bad_first_record_is_the_one_named(tmp_path, write_jsonl):
    """A first record missing a system used to set the expected systems: the good records
    after it were the ones rejected, and the system vanished from the results."""
    recs = [_rec(1, system_summaries={"x": "a"}), *(_rec(i) for i in range(2, 6))]
    path = str(write_jsonl(tmp_path / "s.jsonl", recs))
    with pytest.raises(BadRecordError, match=r"s.jsonl:1: systems in 'system_summaries' differ from the 4 records' "
                                              r"that share one set \['x', 'y'\]: missing \['y'\], extra \[\]"):
        score_jsonl(path, "system_summaries.*")
    res = score_jsonl(path, "system_summaries.*", ScoreParams(on_bad_record="skip"))
    assert [r.line for r in res.rejects] == [1]
    assert set(res.scores["id"]) == {"d2", "d3", "d4", "d5"} and set(res.scores["system"]) == {"x", "y"}


def test_gzip_invalid_utf8_is_named(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b'{"id": "a", "article": "caf\xe9", "highlights": "x"}\n')
    with pytest.raises(BadRecordError, match=rf"{re.escape(str(path))}:1: invalid UTF-8 at byte"):
        load_documents(str(path))


def test_bad_spec_and_option(tmp_path, write_jsonl):
    path = str(write_jsonl(tmp_path / "s.jsonl", [_rec(1)]))
    with pytest.raises(ValueError, match="field spec"):
        score_jsonl(path, ".x")
    with pytest.raises(ValueError, match="on_bad_record"):
        ScoreParams(on_bad_record="drop")


def test_truncated_gzip_stops_and_an_oversized_record_is_a_counted_reject(tmp_path):
    import json

    lines = "".join(json.dumps({"id": f"a{i}", "article": "x" * 40, "highlights": "h"}) + "\n" for i in range(300))
    cut = tmp_path / "refs.jsonl.gz"
    cut.write_bytes(gzip.compress(lines.encode())[:-30])
    with pytest.raises(BadRecordError, match=rf"{cut}:\d+: gzip stream truncated"):
        load_documents(str(cut))

    path = tmp_path / "refs.jsonl"
    path.write_text(
        json.dumps({"id": "a", "article": "fine", "highlights": "h"}) + "\n"
        + json.dumps({"id": "b", "article": "z" * 2000, "highlights": "h"}) + "\n"
    )
    loaded = load_documents(str(path), on_bad_record="skip", max_record_bytes=500)
    assert [d.id for d in loaded.records] == ["a"]
    (reject,) = loaded.rejects
    assert reject.line == 2 and reject.reason.startswith("record too large: 2,0") and len(reject.raw) <= 1100
    with pytest.raises(BadRecordError, match=rf"{path}:2: record too large"):
        load_documents(str(path), max_record_bytes=500)


def test_tokenised_text_scored_as_prose_is_warned_about(tmp_path, write_jsonl):
    """CNN/DailyMail's tokenised summaries split as prose are one sentence each: R-Lsum
    comes out low. The warning says which format to set; none when it is set."""
    recs = [_rec(i, highlights="the cat sat . it was happy .", summary="the cat sat . the dog ran .") for i in range(4)]
    path = str(write_jsonl(tmp_path / "t.jsonl", recs))
    references, summaries = score_jsonl(path, "summary", ScoreParams()).warnings  # prose, the default
    assert references.startswith("4 of 4 references look tokenised") and "reference_format: tokenised" in references
    assert summaries.startswith("4 of 4 summaries of 'summary' look tokenised")
    assert score_jsonl(path, "summary", ScoreParams(reference_format="tokenised", summary_format="tokenised")).warnings == ()
    prose = [_rec(i, highlights="The cat sat. It was happy.", summary="The cat sat. The dog ran.") for i in range(4)]
    assert score_jsonl(str(write_jsonl(tmp_path / "p.jsonl", prose)), "summary").warnings == ()
    # The workflow's own summaries, cut from tokenised articles: no scoring setting helps,
    # so the warning names the articles (it said to set reference_format, already set).
    from shardflow.summarise.data import SummaryRecord
    from shardflow.summarise.rouge import format_warnings

    own = [SummaryRecord(str(i), "the cat sat . it was happy .", {"lead": "the cat sat . the dog ran ."}, 0) for i in range(4)]
    (warning,) = format_warnings(own, ScoreParams(reference_format="tokenised"), own_summaries=True)
    assert warning.startswith("4 of 4 summaries of 'lead' look tokenised") and "the articles are tokenised text" in warning
    assert "reference_format" not in warning
    # Text rouge-score cannot read scores 0, identical summary or not: counted, not silent.
    cyrillic = [SummaryRecord("ru", "Зоя пошла домой.", {"lead": "Зоя пошла домой."}, 0), own[0]]
    warning, summaries = format_warnings(cyrillic, ScoreParams())
    assert warning.startswith("1 of 2 references hold no letter a-z or digit")
    assert summaries.startswith("1 of 2 summaries of 'lead' hold no letter a-z or digit")


def test_prose_scored_as_tokenised_is_warned_about(tmp_path, write_jsonl):
    """The mirror case: prose split as tokenised text (sentences end only at a standalone
    ' . ') is one sentence each, and R-Lsum comes out low, silently. Under method stored the
    summaries are split as the references are unless stored_format says otherwise, so prose system outputs
    beside tokenised CNN/DailyMail highlights are the case to warn about (summarise.stored_format
    splits them as prose); lines, or tokenised text with capitals, are no such case."""
    tokenised = ScoreParams(reference_format="tokenised", summary_format="tokenised")
    prose = "The men will appear in court on Monday. Police arrested two men. They were charged."
    ref = "police arrested two men . they were charged . the men will appear in court monday ."
    path = str(write_jsonl(tmp_path / "s.jsonl", [_rec(i, highlights=ref, summary=prose) for i in range(4)]))
    (summaries,) = score_jsonl(path, "summary", tokenised).warnings
    assert summaries.startswith("4 of 4 summaries of 'summary' look like prose") and "summarise.stored_format: prose" in summaries
    both = [_rec(i, highlights=prose, summary=prose) for i in range(4)]
    references, summaries = score_jsonl(str(write_jsonl(tmp_path / "p.jsonl", both)), "summary", tokenised).warnings
    assert references.startswith("4 of 4 references look like prose") and "reference_format: prose" in references
    assert summaries.startswith("4 of 4 summaries of 'summary' look like prose")
    lines = [_rec(i, highlights=ref, summary=prose.replace(". ", ".\n")) for i in range(4)]
    capitals = [_rec(i, highlights="The cat sat . It was happy .", summary="Police came . They left .") for i in range(4)]
    for name, recs in (("l.jsonl", lines), ("c.jsonl", capitals)):
        assert score_jsonl(str(write_jsonl(tmp_path / name, recs)), "summary", tokenised).warnings == ()


def test_stored_format_prose_scores_prose_outputs_against_tokenised_references(tmp_path, write_jsonl):
    """An LLM's prose summaries beside tokenised CNN/DailyMail highlights: with
    summarise.stored_format: prose each summary has its sentences for ROUGE-Lsum (the score
    of the same summary one sentence a line) and nothing is warned; split as the references
    are (stored_format null), it is one sentence and scores lower."""
    from shardflow.summarise.params import score_params

    prose = "Police arrested them. The men were charged. They will appear in court."
    ref = "the men were charged after police arrested them . they will appear in court ."
    path = str(write_jsonl(tmp_path / "s.jsonl", [_rec(i, highlights=ref, summary=prose) for i in range(3)]))
    lines = str(write_jsonl(tmp_path / "l.jsonl", [_rec(i, highlights=ref, summary=prose.replace(". ", ".\n")) for i in range(3)]))
    config = {
        "input": {"id_field": "id", "on_bad_record": "error", "max_record_mb": 64},
        "summarise": {"method": "stored", "reference_field": "highlights", "reference_format": "tokenised",
                      "stored_format": None, "bootstrap_resamples": 10},
    }
    as_references = ScoreParams(**score_params(config))
    assert as_references.summary_format == "tokenised"
    config["summarise"]["stored_format"] = "prose"
    as_prose = ScoreParams(**score_params(config))
    assert as_prose.summary_format == "prose" and as_prose.reference_format == "tokenised"
    scored = score_jsonl(path, "summary", as_prose)
    assert scored.warnings == ()
    want = score_jsonl(lines, "summary", as_references).scores["rougeLsum"]
    assert list(scored.scores["rougeLsum"]) == list(want)
    assert (score_jsonl(path, "summary", as_references).scores["rougeLsum"] < want).all()
    # the workflow's own summaries are prose whatever the key says
    config["summarise"]["method"] = "lead"
    assert score_params(config)["summary_format"] == "prose"


def test_a_system_whose_texts_read_as_the_other_format_is_named_beside_systems_that_do_not(tmp_path, write_jsonl):
    """One stored_format splits every system of a run: tokenised published outputs beside an
    LLM's prose, in one file, split as tokenised text, put the LLM's summaries at one
    sentence each and its ROUGE-Lsum low. The check pooled every system's texts and acted on
    a majority, so three tokenised systems hid two prose ones (3.6 points of R-Lsum on the
    FRANK sample, no warning): each system is checked on its own texts, and the warning
    names those that read as the other format, with a run of their own to score them in."""
    tok, prose = "police arrested two men . they were charged .", "Police arrested two men. They were charged."
    systems = {"bart": tok, "pgn": tok, "bus": tok, "llm_a": prose, "llm_b": prose}
    recs = [_rec(i, highlights=tok, system_summaries=systems) for i in range(4)]
    path = str(write_jsonl(tmp_path / "m.jsonl", recs))
    (warning,) = score_jsonl(path, "system_summaries.*", ScoreParams(reference_format="tokenised", summary_format="tokenised")).warnings
    assert warning.startswith("4 of 4 summaries of 'llm_a' and 4 of 4 of 'llm_b' look like prose")
    assert "'bart'" not in warning.split(";")[0]
    assert "STORED=system_summaries.llm_a STORED_FORMAT=prose" in warning
    # The mirror: split as prose, the tokenised systems are named, with the key that splits them.
    (warning,) = score_jsonl(path, "system_summaries.*", ScoreParams(reference_format="tokenised")).warnings
    assert warning.startswith("4 of 4 summaries of 'bart', 4 of 4 of 'bus' and 4 of 4 of 'pgn' look tokenised")
    assert "STORED=system_summaries.bart STORED_FORMAT=tokenised" in warning
    # Every system in the other format: one setting fixes them all.
    (warning,) = score_jsonl(path, "system_summaries.llm_a", ScoreParams(reference_format="tokenised", summary_format="tokenised")).warnings
    assert warning.startswith("4 of 4 summaries of 'llm_a' look like prose")
    assert "set summarise.stored_format: prose (STORED_FORMAT=prose)" in warning and "STORED=" not in warning


def test_a_damaged_last_line_stops_the_scoring_before_any_summary_is_scored(tmp_path, monkeypatch):
    """Streamed, method stored found a damaged line only when it reached it: a damaged
    last line of a million stopped the job after half an hour of ROUGE. Under
    on_bad_record: error a first pass reads every record before any is scored."""
    from shardflow.summarise import rouge

    path = tmp_path / "stored.jsonl"
    good = "".join(json.dumps({"id": str(i), "highlights": "a b c.", "summary": "a b."}) + "\n" for i in range(50))
    path.write_text(good + '{"id": "50", "highlights": \n')
    scored = []
    real = rouge.score_summary
    monkeypatch.setattr(rouge, "score_summary", lambda *a, **k: scored.append(1) or real(*a, **k))
    with pytest.raises(BadRecordError, match=r"stored.jsonl:51"):
        rouge.score_jsonl(str(path), "summary", ScoreParams())
    assert scored == []
    skipped = rouge.score_jsonl(str(path), "summary", ScoreParams(on_bad_record="skip"))  # skip: one pass, 50 scored
    assert len(skipped.scores) == 50 and len(skipped.rejects) == 1 and len(scored) == 50
