"""What decides an extractive summary (`SummariseParams`) and a ROUGE evaluation
(`ScoreParams`). Frozen: an unknown key from config is a TypeError, and a bad
value fails here, before any model loads.

Abstractive generation has its own parameters, in `summarise.generate_params` (`GenerateParams`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardflow.core.config import recorded
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.corpus.readers import DEFAULT_MAX_RECORD_BYTES, record_limit_bytes

METHODS = ("lead", "extractive")
# The `summarise` keys each workflow method reads: a summarise job's params hold only
# these, so changing a key its method ignores (mmr_lambda for lead) reruns nothing, and a
# sweep over such a key would run the same job at every point (`ignored_by`).
METHOD_KEYS = {
    "lead": ("method", "k", "splitter", "window"),
    "extractive": ("method", "k", "splitter", "window", "mmr_lambda", "encoder"),
    "abstractive": (
        "method", "model", "dtype", "token_budget", "max_batch_size", "max_input_length", "prefix", "prompt",
        "generation", "seed", "window",
    ),
}


def method_params(sm: dict) -> dict:
    """The `summarise` params of a summarise job (rules/common.smk, summarise_params): the
    keys its method reads (METHOD_KEYS), `generation` as recorded, without the keys added
    to it since abstractive jobs first recorded it while they hold their neutral null
    (core.config.NEUTRAL_ADDED_KEYS: temperature, top_k, top_p), so an upgrade reruns no
    finished summarise job."""
    params = {k: sm[k] for k in METHOD_KEYS[sm["method"]]}
    if "generation" in params:
        params["generation"] = recorded("summarise.generation", params["generation"])
    return params


# Keys a method reads that decide no summary: `window` only sizes its resumable parts
# (each lead or extractive summary depends on its document alone), so a sweep over it
# would run the same summaries at every point. (Abstractive jobs batch within a window,
# and another batch can move the last bits of a summary.)
NO_EFFECT_KEYS = {"lead": ("window",), "extractive": ("window",)}


def without_effect(method: str, dotted_keys) -> list[str]:
    """The `summarise.<key>` names among `dotted_keys` that `method` reads but that change
    none of its summaries (NO_EFFECT_KEYS)."""
    return [k for k in dotted_keys if k.startswith("summarise.") and k.split(".")[1] in NO_EFFECT_KEYS.get(method, ())]


def ignored_by(method: str, dotted_keys) -> list[str]:
    """The `summarise.<key>` (or deeper) names among `dotted_keys` that `method` does not read
    (none for `stored`, which runs no summarise job: its sweeps are refused elsewhere)."""
    reads = METHOD_KEYS.get(method)
    if reads is None:
        return []
    return [k for k in dotted_keys if k.startswith("summarise.") and k.split(".")[1] not in reads]
SPLITTER_NAMES = ("punctuation", "prose")
SENTENCE_FORMATS = ("prose", "tokenised")


@dataclass(frozen=True)
class SummariseParams:
    """method: "lead" (first k sentences) or "extractive" (MMR over sentence embeddings).
    k: sentences per summary.
    mmr_lambda: extractive only; weight of relevance against redundancy, in [0, 1]
        (1: the k sentences closest to the document centroid; 0: only diversity).
    splitter: "punctuation" (the published Lead-3 comparisons' simple splitter) or
        "prose" (also keeps abbreviations and initials together); see `sentences`.
    window: documents per resumable part.
    """

    method: str = "lead"
    k: int = 3
    mmr_lambda: float = 0.7
    splitter: str = "punctuation"
    window: int = 1024

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # k 2.0 cuts sentences[:k]
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r}: expected one of {METHODS}")
        if self.splitter not in SPLITTER_NAMES:
            raise ValueError(f"splitter {self.splitter!r}: expected one of {SPLITTER_NAMES}")
        check_field_types(self)  # before the bounds: a string there is Python's bare TypeError, True a k of 1
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ValueError(f"mmr_lambda must be in [0, 1], got {self.mmr_lambda}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")


@dataclass(frozen=True)
class ScoreParams:
    """How summaries are scored (see `summarise.rouge`).

    reference_format / summary_format: how ROUGE-Lsum finds sentences, "prose"
        (`split_sentences`) or "tokenised" (`split_tokenised`; CNN/DailyMail
        highlights and system outputs).
    resamples, seed, level: the bootstrap confidence interval.
    max_record_bytes: the longest line read (input.max_record_mb, the split's limit on the
        same files); a longer one is a bad record.
    """

    reference_format: str = "prose"
    summary_format: str = "prose"
    resamples: int = 1000
    seed: int = 0
    level: float = 0.95
    id_field: str | None = "id"  # None: ids are source positions, <path>:<line>
    # None where the input has none (summarise.reference_field: null, the shipped config):
    # the rules' params hold it, but no scoring job is asked for then (workflow.tasks).
    reference_field: str | None = "highlights"
    on_bad_record: str = "error"  # error | skip
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # bootstrap_resamples 1000.0 (the schema's "integer" takes it): numpy counts with it
        for name in ("reference_format", "summary_format"):
            if getattr(self, name) not in SENTENCE_FORMATS:
                raise ValueError(f"{name} {getattr(self, name)!r}: expected one of {SENTENCE_FORMATS}")
        if self.on_bad_record not in ("error", "skip"):
            raise ValueError(f"on_bad_record {self.on_bad_record!r}: expected 'error' or 'skip'")
        # Before the bounds: a string there is Python's bare TypeError; a seed of '0' was kept,
        # and failed in numpy's bootstrap after every summary was scored.
        check_field_types(self)
        if self.resamples < 1:
            raise ValueError(f"resamples must be >= 1, got {self.resamples}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level}")
        if self.max_record_bytes < 1:
            raise ValueError(f"max_record_bytes must be >= 1, got {self.max_record_bytes}")


def score_params(cfg: dict) -> dict:
    """The `score` params of the rules that score summaries (evaluate_summaries, its sweep
    copy, score_stored_summaries): ScoreParams' fields from the config. The input's id and
    reference fields, how Lsum finds sentences, the bootstrap, bad records, the record limit."""
    sm, inp = cfg["summarise"], cfg["input"]
    stored = sm["method"] == "stored"
    params = {
        "id_field": inp["id_field"],
        "reference_field": sm["reference_field"],
        "reference_format": sm["reference_format"],
        # Stored system outputs are split as summarise.stored_format says, by default as
        # the references are; the workflow's own summaries hold one sentence a line
        # (lead, extractive) or prose. (A null stored_format gives the params they had
        # before the key: nothing reruns.)
        "summary_format": (sm["stored_format"] or sm["reference_format"]) if stored else "prose",
        "resamples": sm["bootstrap_resamples"],
        "on_bad_record": inp["on_bad_record"],
    }
    # input.max_record_mb reached these jobs after their outputs existed: recorded only
    # away from its neutral value (core.config.NEUTRAL_ADDED_KEYS, 64: the fixed limit they
    # read with before, ScoreParams' default), so an upgrade reruns no finished evaluation.
    if "max_record_mb" in recorded("input", {"max_record_mb": inp["max_record_mb"]}):
        params["max_record_bytes"] = record_limit_bytes(inp["max_record_mb"])
    return params
