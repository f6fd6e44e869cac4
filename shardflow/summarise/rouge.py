"""ROUGE the way CNN/DailyMail papers report it, on Google's `rouge-score`
(pinned 0.1.2 in requirements/lock.txt), plus means and bootstrap intervals.

Protocol:
- `RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)`,
  `score(target=reference, prediction=summary)`; we keep F1 (`fmeasure`) x 100.
- rouge-score lower-cases, turns every run of characters outside [a-z0-9] into
  a space and Porter-stems tokens longer than 3 characters, so punctuation and
  case never change a score.
- rouge1, rouge2 and rougeL see the texts as given.
- rougeLsum is summary-level LCS over sentences, and rouge-score takes sentences
  to be lines. So both sides are split first and joined with "\\n": a list of
  sentences is used as is; a string is split by its format, "prose"
  (`split_sentences`) or "tokenised" (`split_tokenised`). CNN/DailyMail
  references are "tokenised" (highlights joined with " . "), and so are the
  stored system outputs (lower-cased, so capitals cannot mark a start).
  Lines end where rouge-score ends them, at "\\n" alone (`newline_only`): a
  CR alone, a form feed, U+2028 and the other line boundaries of
  `str.splitlines` are whitespace inside a sentence there, so a text one
  sentence a line scores as rouge-score scores it.
- A system's score is the plain mean over its documents of their F1, exact. It is
  not what rouge-score's `BootstrapAggregator` reports (nor Hugging Face evaluate's
  "rouge", which returns that aggregator's `mid.fmeasure` by default): `mid` is the
  median of the means of its resamples (1000, drawn from numpy's global random state,
  which it never seeds), taken for precision, recall and F1 each. It moves from run
  to run, about 0.1 points either way at 100 documents (Lead-3 on the CNN/DailyMail
  sample of ../shared/data: R-1 40.31-40.48 over 20 seeds, mean 40.39), so numbers
  from there differ from ours by that much. (evaluate's "rouge" also stems only when
  asked, `use_stemmer=True`.)
- Confidence interval: bootstrap over documents, `resamples` (default 1000)
  samples of n documents drawn with replacement by
  `numpy.random.default_rng(seed).integers(0, n, size=(resamples, n))`; the
  interval is the (1 - level)/2 and (1 + level)/2 percentiles (numpy's default
  linear interpolation) of the resampled means. For the same seed and n every
  system and metric sees the same resamples (a paired bootstrap). The workflow's
  seed is 0: a rerun gives the same interval.
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from shardflow.core.atomic import atomic_path
from shardflow.summarise.data import Rejected, SummaryRecord, read_summaries
from shardflow.summarise.params import ScoreParams
from shardflow.summarise.sentences import split_sentences, split_tokenised

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
BOOTSTRAP_RESAMPLES = 1000
DEFAULT_PARAMS = ScoreParams()
# ROUGE-Lsum's sentences by format, in lines cut at "\n" alone, as rouge-score cuts them.
_SPLITTERS = {
    "prose": functools.partial(split_sentences, newline_only=True),
    "tokenised": functools.partial(split_tokenised, newline_only=True),
}
# What rouge-score's tokenizer keeps of a lower-cased text (see the protocol above).
_ROUGE_CHARS = re.compile(r"[a-z0-9]")
_OTHER = {"prose": "tokenised", "tokenised": "prose"}


@functools.lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer  # imports nltk; only when scoring

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def sentence_lines(text: str | Sequence[str], fmt: str = "prose") -> str:
    """`text` as one sentence a line, for rougeLsum (a list is taken as sentences)."""
    if fmt not in _SPLITTERS:
        raise ValueError(f"sentence format {fmt!r}: expected one of {sorted(_SPLITTERS)}")
    sentences = _SPLITTERS[fmt](text) if isinstance(text, str) else list(text)
    return "\n".join(s.strip() for s in sentences)


def score_summary(
    reference: str | Sequence[str],
    summary: str | Sequence[str],
    *,
    reference_format: str = "prose",
    summary_format: str = "prose",
) -> dict[str, float]:
    """F1 x 100 for each of ROUGE_TYPES. A list is a summary already split into sentences."""
    # Splitting only cuts at whitespace, so the line form has the same tokens as the
    # text as given: rouge1/2/L are unchanged, and one call scores all four.
    scores = _scorer().score(sentence_lines(reference, reference_format), sentence_lines(summary, summary_format))
    # float(): rouge-score's LCS scores of a side without a token are the int 0, which
    # made a column of such documents alone (a system that wrote nothing) int64.
    return {t: float(scores[t].fmeasure) * 100 for t in ROUGE_TYPES}


def score_records(records: Iterable[SummaryRecord], params: ScoreParams = DEFAULT_PARAMS) -> pd.DataFrame:
    """One row per (document, system): id, system, rouge1, rouge2, rougeL, rougeLsum."""
    table = ScoreTable(params)
    for rec in records:
        table.add(rec)
    return table.frame()


class ScoreTable:
    """`score_records` a record at a time: each record is scored as it comes and only its
    scores are kept, a float64 each in a column per metric (a row dict each held about
    ten times as much), so its texts can go."""

    def __init__(self, params: ScoreParams = DEFAULT_PARAMS) -> None:
        self.params = params
        self.ids: list[str] = []
        self.systems: list[str] = []
        self.columns = {t: array("d") for t in ROUGE_TYPES}

    def add(self, rec: SummaryRecord) -> None:
        for system, text in rec.summaries.items():
            s = score_summary(
                rec.reference,
                text,
                reference_format=self.params.reference_format,
                summary_format=self.params.summary_format,
            )
            self.ids.append(rec.id)
            self.systems.append(system)
            for t in ROUGE_TYPES:
                self.columns[t].append(s[t])

    def frame(self) -> pd.DataFrame:
        if not self.ids:  # the columns' types as score_records gave them with no row
            return pd.DataFrame([], columns=["id", "system", *ROUGE_TYPES])
        columns = {t: np.frombuffer(self.columns[t], dtype=np.float64) for t in ROUGE_TYPES}
        return pd.DataFrame({"id": self.ids, "system": self.systems, **columns}, columns=["id", "system", *ROUGE_TYPES])


@dataclass(frozen=True)
class ScoredFile:
    scores: pd.DataFrame  # per (document, system), as `score_records`
    rejects: list[Rejected]  # empty unless params.on_bad_record == "skip"
    warnings: tuple[str, ...] = ()  # format_warnings


def format_warnings(
    records: Iterable[SummaryRecord],
    params: ScoreParams,
    own_summaries: bool = False,
    stored_field: str | None = None,
) -> tuple[str, ...]:
    """`FormatWarnings` of `records`, read once."""
    counts = FormatWarnings(params, own_summaries, stored_field)
    for rec in records:
        counts.add(rec)
    return counts.warnings()


@dataclass
class _SystemCounts:
    texts: int = 0
    as_other: int = 0  # read as the other format (`_reads_as_other`)
    unread: int = 0  # hold nothing rouge-score reads


class FormatWarnings:
    """Warnings about texts rouge-score will not read as the scoring meant, each counted,
    a record at a time (`add`), so that nothing holds the records:
    - references, and each system's summaries, split in one format (reference_format,
      summary_format) where most of them look like the other: split as prose, tokenised
      text (CNN/DailyMail's " . " between sentences) is one sentence each; split as
      tokenised, prose (punctuation on the word) is too; ROUGE-Lsum comes out several
      points low, silently. Summaries are checked per system and the warning names each
      system that reads as the other format: under method stored one stored_format splits
      every system of a run, and prose system outputs (an LLM's) beside tokenised ones
      (published CNN/DailyMail systems) are the likely case. `stored_field` (the stored
      field spec, "a.*") names the field that scores one system on its own.
    - `own_summaries`: the summaries are the workflow's (lead, extractive, abstractive), cut
      from the articles: tokenised ones mean tokenised articles, which no setting of the
      scoring changes.
    - the references rouge-score reads nothing of (it reads a-z and 0-9 alone), those it
      reads only a minority of the letters and digits of, and per system the summaries it
      reads nothing of (empty ones included): each scores 0."""

    def __init__(self, params: ScoreParams, own_summaries: bool = False, stored_field: str | None = None) -> None:
        self.params, self.own_summaries, self.stored_field = params, own_summaries, stored_field
        self.references = 0
        self.references_as_other = 0
        self.references_unread = 0
        self.references_mostly_dropped = 0
        self.systems: dict[str, _SystemCounts] = {}  # in first-seen order

    def add(self, rec: SummaryRecord) -> None:
        self.references += 1
        self.references_as_other += _reads_as_other(rec.reference, self.params.reference_format)
        read, dropped = _read_and_dropped(" ".join(_flat(rec.reference)))
        self.references_unread += read == 0
        # Those with a little to read are scored on that little: a Chinese reference's year
        # alone, so that an unrelated summary with the same year scores 100.
        self.references_mostly_dropped += 0 < read < dropped
        for system, text in rec.summaries.items():
            counts = self.systems.setdefault(system, _SystemCounts())
            counts.texts += 1
            counts.as_other += _reads_as_other(text, self.params.summary_format)
            counts.unread += _read_and_dropped(" ".join(_flat(text)))[0] == 0

    def warnings(self) -> tuple[str, ...]:
        out = []
        n = self.references
        if n:
            out.extend(_reference_format_warning(self.references_as_other, n, self.params.reference_format))
        formats = {system: (c.as_other, c.texts) for system, c in self.systems.items()}
        out.extend(_summary_format_warning(formats, self.params.summary_format, self.own_summaries, self.stored_field))
        if self.references_unread:
            out.append(
                f"{self.references_unread} of {n} references hold no letter a-z or digit, all rouge-score reads "
                "(other scripts, such as Cyrillic or CJK, are dropped): their documents score 0 and count in the means"
            )
        if self.references_mostly_dropped:
            out.append(
                f"{self.references_mostly_dropped} of {n} references are mostly letters or digits rouge-score drops "
                "(it reads a-z and 0-9 only; other scripts, such as Cyrillic or CJK, and accented letters are "
                "dropped): they are scored on what is left, such as their numbers and Latin words, so their ROUGE "
                "says little"
            )
        unread_summaries = {system: (c.unread, c.texts) for system, c in self.systems.items() if c.unread}
        if unread_summaries:
            out.append(
                f"{_per_system(unread_summaries)} hold no letter a-z or digit, all rouge-score reads (empty ones "
                "included; other scripts, such as Cyrillic or CJK, are dropped): they score 0 on every metric and "
                "count in their system's means"
            )
        return tuple(out)


def _reads_as_other(text: str, fmt: str) -> bool:
    """Whether `text` splits into more sentences in the other format than in `fmt` (looks
    like the other format). A text whose sentences are lines, or tokenised with capitals,
    splits alike both ways: no case."""
    return len(_SPLITTERS[_OTHER[fmt]](text)) > len(_SPLITTERS[fmt](text))


def _looks(fmt: str) -> str:
    """What texts split in `fmt` that read as the other format look like."""
    if fmt == "tokenised":
        return (
            "look like prose (sentence punctuation attached to the word) but are split as tokenised text, whose "
            "sentences end only at a standalone ' . '"
        )
    return "look tokenised (sentences end in a standalone ' . ') but are split as prose"


def _reference_format_warning(looks: int, n: int, fmt: str) -> list[str]:
    """The warning about references that mostly read as the other format than `fmt`:
    `looks` of `n` do (`_reads_as_other`)."""
    if looks <= n / 2:
        return []
    other = _OTHER[fmt]
    hint = " (CNN/DailyMail)" if other == "tokenised" else ""
    return [
        f"{looks} of {n} references {_looks(fmt)}: ROUGE-Lsum sees fewer sentences than there are and "
        f"comes out low; if the references are {other}{hint}, set summarise.reference_format: {other} "
        f"(REFERENCE_FORMAT={other})"
    ]


def _summary_format_warning(
    counts: dict[str, tuple[int, int]], fmt: str, own_summaries: bool, stored_field: str | None
) -> list[str]:
    """The warning about the systems whose summaries mostly read as the other format than
    `fmt`, naming each (`FormatWarnings`); none when there is no such system. `counts`:
    {system: (summaries that read as the other format, summaries)}."""
    off = {system: (looks, n) for system, (looks, n) in counts.items() if looks > n / 2}
    if not off:
        return []
    head = f"{_per_system(off)} {_looks(fmt)}: ROUGE-Lsum sees fewer sentences than there are and comes out low; "
    if own_summaries and fmt == "prose":
        return [
            head + "the articles are tokenised text, and lead or extractive may have found few sentence ends in "
            "them (summary_tokens_mean near the articles' length says so); summarise prose articles for "
            "comparable numbers"
        ]
    other = _OTHER[fmt]
    if len(off) == len(counts):
        return [
            head + f"if the stored summaries are {other}, set summarise.stored_format: {other} "
            f"(STORED_FORMAT={other}); by default they are split as the references are (summarise.reference_format)"
        ]
    # One stored_format splits every system of a run, and a stored field names one system or all.
    rest = ", ".join(repr(s) for s in counts if s not in off)
    field = stored_field[:-1] if stored_field and stored_field.endswith(".*") else "<field>."
    first = next(iter(off))
    return [
        head + f"the other systems ({rest}) do not, and summarise.stored_format splits every system of a run "
        f"alike: score each of these in a run of its own, summarise.stored_field: {field}{first} with "
        f"summarise.stored_format: {other} (STORED={field}{first} STORED_FORMAT={other}), and keep this run's "
        f"numbers for the other systems"
    ]


def _per_system(counts: dict[str, tuple[int, int]]) -> str:
    """"3 of 4 summaries of 'a' and 1 of 4 of 'b'" from {system: (count, of)}."""
    parts = [f"{k} of {n} of {system!r}" for system, (k, n) in counts.items()]
    k, n = next(iter(counts.values()))
    parts[0] = f"{k} of {n} summaries of {next(iter(counts))!r}"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _flat(text: str | Sequence[str]) -> list[str]:
    return [text] if isinstance(text, str) else list(text)


def _read_and_dropped(text: str) -> tuple[int, int]:
    """How many letters and digits of `text`, lower-cased as rouge-score reads it, its
    tokenizer keeps (a-z, 0-9) and how many it drops (any other letter or digit)."""
    lower = text.lower()
    read = len(_ROUGE_CHARS.findall(lower))
    return read, sum(c.isalnum() for c in lower) - read


def score_jsonl(path: str | Sequence[str], summaries: str, params: ScoreParams = DEFAULT_PARAMS) -> ScoredFile:
    """Score stored summaries in a JSONL(.gz) file, or several read as one input (ids
    unique across them, one set of systems: `summarise.data`), against the reference field.

    `summaries` is a field spec: "summary", "system_summaries.bart" or
    "system_summaries.*" (every system at once); see `summarise.data`.
    """
    def read():
        return read_summaries(
            path,
            summaries,
            id_field=params.id_field,
            reference_field=params.reference_field,
            on_bad_record=params.on_bad_record,
            max_record_bytes=params.max_record_bytes,
        )

    if params.on_bad_record == "error":
        # A first pass, holding nothing, finds a bad record before any is scored: a damaged
        # last line of a million stops the job at once, not after half an hour of ROUGE.
        for _ in read().records:
            pass
    reading = read()
    table, warnings = ScoreTable(params), FormatWarnings(params, stored_field=summaries)
    for rec in reading.records:  # one record held at a time
        table.add(rec)
        warnings.add(rec)
    return ScoredFile(table.frame(), reading.rejects, warnings.warnings())


# Values indexed at once when averaging resamples: a block of resamples at a time.
BOOTSTRAP_BLOCK_VALUES = 1 << 18


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of `values` (see the module docstring)."""
    return bootstrap_cis([values], resamples=resamples, seed=seed, level=level)[0]


def bootstrap_cis(
    columns: Sequence[Sequence[float]], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, level: float = 0.95
) -> list[tuple[float, float]]:
    """`bootstrap_ci` of each of `columns`, of one length n, on the same resamples (a paired
    bootstrap). The resamples' document rows are drawn a block of resamples at a time, and
    each block serves every column before the next is drawn: numpy fills an array from
    its stream in order, so these are the rows drawn whole, which were held as one array
    (4 bytes a document per resample: 4 GB at 1,000 resamples of a million documents)
    and kept after the evaluation. Drawn as int32: numpy draws a bounded integer below
    2**32 the same way for int32 and int64, so these are int64's draws. A block's means
    are each row's as the whole array's (the same sums, bit for bit)."""
    xs = [np.asarray(c, dtype=np.float64) for c in columns]
    if not xs:
        return []
    n = xs[0].size
    if n == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if any(x.size != n for x in xs):
        raise ValueError(f"bootstrap_cis needs columns of one length, got {sorted({x.size for x in xs})}")
    rng = np.random.default_rng(seed)
    dtype = np.int32 if n < 2**31 else np.int64
    block = max(1, BOOTSTRAP_BLOCK_VALUES // n)
    means = np.empty((len(xs), resamples))
    for start in range(0, resamples, block):
        rows = rng.integers(0, n, size=(min(block, resamples - start), n), dtype=dtype)
        for k, x in enumerate(xs):
            means[k, start : start + len(rows)] = x[rows].mean(axis=1)
    return [
        (float(lo), float(hi)) for lo, hi in (np.percentile(m, [50 * (1 - level), 50 * (1 + level)]) for m in means)
    ]


def system_means(scores: pd.DataFrame, params: ScoreParams = DEFAULT_PARAMS) -> pd.DataFrame:
    """Per system and metric: n, mean, ci_low, ci_high (systems in first-seen order)."""
    columns = [
        (system, metric, group[metric].to_numpy())
        for system, group in scores.groupby("system", sort=False)
        for metric in ROUGE_TYPES
    ]
    # Columns of one length share each block of resamples (bootstrap_cis): drawn once for
    # them all, as when the whole draw was kept for the next.
    by_length: dict[int, list[int]] = {}
    for k, (_, _, values) in enumerate(columns):
        by_length.setdefault(len(values), []).append(k)
    cis: dict[int, tuple[float, float]] = {}
    for ks in by_length.values():
        found = bootstrap_cis([columns[k][2] for k in ks], resamples=params.resamples, seed=params.seed,
                              level=params.level)
        cis.update(zip(ks, found, strict=True))
    rows = [
        {"system": system, "metric": metric, "n": len(values), "mean": float(values.mean()),
         "ci_low": cis[k][0], "ci_high": cis[k][1]}
        for k, (system, metric, values) in enumerate(columns)
    ]
    return pd.DataFrame(rows, columns=["system", "metric", "n", "mean", "ci_low", "ci_high"])


def write_parquet(table: pd.DataFrame, path: str) -> None:
    """Write a score table to Parquet atomically (readers never see half a file)."""
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pandas(table, preserve_index=False), tmp)
