"""ROUGE scores against hand-computed values, bootstrap intervals, Parquet output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from shardflow.summarise.data import SummaryRecord
from shardflow.summarise.params import ScoreParams
from shardflow.summarise.rouge import (
    ROUGE_TYPES,
    bootstrap_ci,
    bootstrap_cis,
    format_warnings,
    score_records,
    score_summary,
    sentence_lines,
    system_means,
    write_parquet,
)


def test_unigram_bigram_lcs_by_hand():
    # ref: the cat sat on the mat (6 tokens, 5 bigrams); summary: the cat sat (3, 2).
    # Overlaps: 3 unigrams, 2 bigrams, LCS 3. F1 = 2PR / (P + R).
    s = score_summary("The cat sat on the mat.", "the cat sat")
    assert s["rouge1"] == pytest.approx(100 * 2 * 1 * 0.5 / 1.5)  # P 1, R 1/2
    assert s["rouge2"] == pytest.approx(100 * 2 * 1 * 0.4 / 1.4)  # P 1, R 2/5
    assert s["rougeL"] == pytest.approx(s["rouge1"])
    assert s["rougeLsum"] == pytest.approx(s["rougeL"])  # one sentence each side


def test_stemming_and_punctuation_do_not_matter():
    # Porter stems tokens longer than 3 characters: running -> run, dogs -> dog.
    s = score_summary("Running DOGS!", "run dog")
    assert s == pytest.approx({"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0, "rougeLsum": 100.0})
    assert score_summary("cats", "dogs")["rouge1"] == 0.0


def test_rougelsum_matches_sentence_by_sentence():
    # Swapped sentences: one LCS over the whole text finds 3 of 6 tokens (F1 50);
    # summary-level LCS matches each reference sentence in full (F1 100).
    s = score_summary(["a b c", "d e f"], ["d e f", "a b c"])
    assert s["rougeL"] == pytest.approx(50.0)
    assert s["rougeLsum"] == pytest.approx(100.0)
    # The same texts as strings, split by their format, give the same numbers.
    prose = score_summary("A b c. D e f.", "D e f. A b c.")
    tok = score_summary("a b c . d e f .", "d e f . a b c .", reference_format="tokenised", summary_format="tokenised")
    assert prose["rougeLsum"] == tok["rougeLsum"] == pytest.approx(100.0)
    # Lower-case tokenised text read as prose is one sentence: Lsum falls back to rougeL.
    assert score_summary("a b c . d e f .", "d e f . a b c .")["rougeLsum"] == pytest.approx(50.0)


# Every line boundary of str.splitlines but "\n" (and "\r\n", whose "\r" rouge-score drops).
OTHER_LINE_BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("fmt", ["prose", "tokenised"])
@pytest.mark.parametrize("sep", OTHER_LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in OTHER_LINE_BREAKS])
def test_rougelsum_cuts_lines_at_newlines_alone_as_rouge_score_does(fmt, sep):
    """rouge-score's ROUGE-Lsum takes a text's "\\n" lines for its sentences
    (`text.split("\\n")`); the splitters cut lines at every boundary `str.splitlines`
    knows, so a reference holding a form feed, a CR alone or U+2028 between two
    sentences' words was two sentences here and one in rouge-score: 91.7 where
    rouge-score gives 75. A text one sentence a line now scores as rouge-score scores it."""
    from rouge_score import rouge_scorer

    reference = f"police found the car{sep}the driver fled on foot\nno one was hurt"
    summary = f"the driver found the car on foot{sep}\nno one was hurt"  # a line may end in one ("\r\n")
    expected = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True).score(reference, summary)
    got = score_summary(reference, summary, reference_format=fmt, summary_format=fmt)
    assert got["rougeLsum"] == pytest.approx(expected["rougeLsum"].fmeasure * 100) == pytest.approx(75.0)
    # Within a line such a character is whitespace, where a sentence can still end.
    two = f"The car was found.{sep}The driver fled." if fmt == "prose" else f"the car was found .{sep}the driver fled ."
    assert sentence_lines(two, fmt) == "\n".join(two.split(sep))


def test_unknown_sentence_format_is_an_error():
    with pytest.raises(ValueError, match="sentence format 'ptb'"):
        score_summary("a", "a", reference_format="ptb")


def _bootstrap_and_whole_draw(values, dtype):
    """(bootstrap_ci's interval of `values` at 1,000 resamples, the interval of the whole
    draw of rows as `dtype` at once, the bootstrap's peak traced memory)."""
    import tracemalloc

    idx = np.random.default_rng(0).integers(0, values.size, size=(1000, values.size), dtype=dtype)
    expected = tuple(float(v) for v in np.percentile(values[idx].mean(axis=1), [2.5, 97.5]))
    del idx
    tracemalloc.start()
    try:
        got = bootstrap_ci(values, resamples=1000, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return got, expected, peak


def test_the_bootstrap_of_a_large_corpus_holds_no_resamples_by_documents_array_of_floats():
    """The resamples were drawn as one int64 array of resamples x documents and indexed
    into a float64 one as large: 4.6 GB at 1,000 resamples of CNN/DailyMail's 287k
    training documents, per system and metric. The same draws are taken as int32 and
    averaged a block of resamples at a time: the same interval, bit for bit, in about a
    quarter of the memory (the rows' int32; a block's floats are small)."""
    values = np.random.default_rng(5).random(5000)
    got, expected, peak = _bootstrap_and_whole_draw(values, np.int64)
    assert got == expected
    assert peak < 0.3 * 80e6, peak  # the two arrays held 80 MB here


def test_the_bootstrap_draws_its_resamples_a_block_at_a_time():
    """The resamples' document rows were drawn whole, resamples x documents as int32, and
    kept after the evaluation for the next: 4 KB a document at 1,000 resamples (4 GB for a
    million documents), most of what scoring a large corpus held. Drawn a block of
    resamples at a time from the one stream they are the same rows, so the same interval
    bit for bit, in a block's memory; the columns of one length (a system's four metrics,
    and every system's) share each block, a paired bootstrap as before."""
    values = np.random.default_rng(7).random(20_011)  # an n no other test draws
    got, expected, peak = _bootstrap_and_whole_draw(values, np.int32)
    assert got == expected
    assert peak < 0.1 * 1000 * values.size * 4, peak  # a tenth of the rows
    other = values[::-1].copy()
    assert bootstrap_cis([values, other], resamples=1000, seed=0) == [got, bootstrap_ci(other, resamples=1000, seed=0)]
    with pytest.raises(ValueError, match="columns of one length"):
        bootstrap_cis([values, other[1:]])


def test_format_warnings_reads_its_records_once_as_they_come():
    """format_warnings counts a record at a time (FormatWarnings), so the records may come
    from a generator and nothing holds them all. It read its records three times over: a
    generator's second pass found none, and no summary was counted."""
    en = "It rained in Beijing today."
    recs = [SummaryRecord("a", en, {"llm": "北京今天下雨。"}, 0), SummaryRecord("b", en, {"llm": ""}, 0)]
    (warning,) = format_warnings(iter(recs), ScoreParams())
    assert warning.startswith("2 of 2 summaries of 'llm' hold no letter a-z or digit")
    assert format_warnings(recs, ScoreParams()) == (warning,)


def test_bootstrap_ci_contains_mean_and_is_seeded():
    values = np.random.default_rng(1).normal(40, 10, size=50)
    lo, hi = bootstrap_ci(values, resamples=1000, seed=0)
    assert lo < values.mean() < hi
    assert bootstrap_ci(values, resamples=1000, seed=0) == (lo, hi)
    assert bootstrap_ci(values, resamples=1000, seed=1) != (lo, hi)
    # Roughly mean +- 1.96 standard errors for a normal sample.
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.2)
    assert bootstrap_ci([7.0, 7.0, 7.0]) == (7.0, 7.0)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_score_records_means_and_parquet(tmp_path):
    records = [
        SummaryRecord("d1", "the cat sat", {"a": "the cat sat", "b": "dogs"}, 1),
        SummaryRecord("d2", "a dog ran", {"a": "a dog", "b": "a dog ran"}, 2),
    ]
    scores = score_records(records)
    assert list(scores.columns) == ["id", "system", "rouge1", "rouge2", "rougeL", "rougeLsum"]
    assert list(zip(scores["id"], scores["system"], strict=True)) == [("d1", "a"), ("d1", "b"), ("d2", "a"), ("d2", "b")]
    means = system_means(scores, ScoreParams(resamples=200, seed=3)).set_index(["system", "metric"])
    assert means.loc[("a", "rouge1"), "mean"] == pytest.approx((100 + 80) / 2)  # d2: P 1, R 2/3 -> F1 0.8
    assert means.loc[("b", "rouge1"), "mean"] == pytest.approx(50.0)
    assert (means["ci_low"] <= means["mean"]).all() and (means["mean"] <= means["ci_high"]).all()
    assert (means["n"] == 2).all()

    out = tmp_path / "scores" / "per_doc.parquet"
    write_parquet(scores, out)
    pd.testing.assert_frame_equal(pq.read_table(out).to_pandas(), scores)
    assert [p.name for p in out.parent.iterdir()] == ["per_doc.parquet"]  # no temporary left behind


def test_references_mostly_in_letters_rouge_score_drops_are_warned_about():
    """rouge-score reads a-z and 0-9 only: a Chinese or Russian reference with a year in it
    is scored on the year, so an unrelated summary with that year scores 100. Such
    references are counted in a warning, as those with nothing to read are; accented
    Latin text and English with a foreign name are not."""
    zh = SummaryRecord("zh", "2024年北京举办了国际会议，各国代表讨论了气候变化问题。", {"s": "2024年上海的天气很好。"}, 0)
    ru = SummaryRecord("ru", "В 2024 году в Москве прошла конференция по климату.", {"s": "В 2024 году погода была хорошей."}, 0)
    assert score_summary(zh.reference, zh.summaries["s"])["rouge1"] == 100.0  # rouge-score's number, kept
    fr = SummaryRecord("fr", "Le président a rencontré le Premier ministre à Londres.", {"s": "Le président"}, 0)
    en = SummaryRecord("en", "Xi Jinping (习近平) met the prime minister in London on Monday.", {"s": "Xi met"}, 0)
    none = SummaryRecord("none", "東京は大きい。", {"s": "東京"}, 0)
    (mostly,) = format_warnings([zh, ru, fr, en], ScoreParams())
    assert mostly.startswith("2 of 4 references are mostly letters or digits rouge-score drops")
    assert format_warnings([fr, en], ScoreParams()) == ()
    # One with nothing rouge-score reads is counted once, by the warning that says so.
    unread, mostly, summaries = format_warnings([none, zh, fr], ScoreParams())
    assert unread.startswith("1 of 3 references hold no letter a-z or digit")
    assert mostly.startswith("1 of 3 references are mostly letters or digits rouge-score drops")
    assert summaries.startswith("1 of 3 summaries of 's' hold no letter a-z or digit")  # 東京


def test_summaries_rouge_score_reads_nothing_of_are_counted_per_system():
    """A Chinese summary of an English article scores 0 on every metric, as an empty one
    does: rouge-score's tokenizer keeps a-z and 0-9 alone. References like that were
    counted; summaries were not, so a system's mean fell with no word why. Each system's
    count is a warning naming it."""
    en = "It rained in Beijing today."
    recs = [
        SummaryRecord("a", en, {"llm": "北京今天下雨。", "lead": en}, 0),
        SummaryRecord("b", en, {"llm": "", "lead": "Rain in Beijing."}, 0),
        SummaryRecord("c", en, {"llm": "Rain.", "lead": "Дождь в Пекине."}, 0),
    ]
    assert score_summary(en, "北京今天下雨。") == dict.fromkeys(ROUGE_TYPES, 0.0)
    (warning,) = format_warnings(recs, ScoreParams())
    assert warning.startswith("2 of 3 summaries of 'llm' and 1 of 3 of 'lead' hold no letter a-z or digit")
    assert "empty ones included" in warning and "score 0" in warning
    assert format_warnings(recs[2:3], ScoreParams(), own_summaries=True)[0].startswith("1 of 1 summaries of 'lead'")
    assert format_warnings([SummaryRecord("d", en, {"lead": "Rain in 2015."}, 0)], ScoreParams()) == ()


def test_no_records_score_to_an_empty_table_of_the_columns_types_as_before():
    """Scores kept in float64 columns made an empty table's id and system float64 too."""
    from shardflow.summarise.rouge import score_records

    empty = score_records([])
    assert list(empty.columns) == ["id", "system", *ROUGE_TYPES] and all(str(t) == "object" for t in empty.dtypes)
