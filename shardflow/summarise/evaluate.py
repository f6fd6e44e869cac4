"""ROUGE of the workflow's summaries against the references in its input, and of
summaries already stored in an input (method `stored`), as CNN/DailyMail papers
score them (see `rouge`): F1 x 100 for rouge1/2/L/Lsum with stemming, bootstrap
95% intervals, one row per (document, system) in Parquet.

References come from the same input files the split read (JSONL or JSONL.gz),
joined by id. A summary whose document has no usable reference is an error naming
the file and line of the reference (or, with on_bad_record skip, a counted reject);
nothing is dropped silently.
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass

import numpy as np

from shardflow.core.atomic import write_json
from shardflow.core.figures import pyplot, save_figure
from shardflow.core.files import iter_json_lines
from shardflow.core.s3 import logical_path
from shardflow.summarise.data import SummaryRecord, read_references
from shardflow.summarise.params import ScoreParams
from shardflow.summarise.records import iter_summaries
from shardflow.summarise.rouge import (
    ROUGE_TYPES,
    FormatWarnings,
    ScoreTable,
    score_jsonl,
    system_means,
    write_parquet,
)

log = logging.getLogger(__name__)
# References set aside are counted in metrics.json and named in the job's log, the first this many.
MAX_LOGGED_REJECTS = 20


class MissingReferenceError(ValueError):
    """A summarised document has no reference in the input files."""


@dataclass(frozen=True)
class Scored:
    metrics: dict
    rejects: list


def log_rejects(rejects: list, what: str) -> None:
    """Name each record set aside (source, line, reason) in the job's log, the first
    MAX_LOGGED_REJECTS; metrics.json counts them all."""
    for r in rejects[:MAX_LOGGED_REJECTS]:
        log.warning("%s set aside: %s:%s: %s", what, r.source, r.line, r.reason)
    if len(rejects) > MAX_LOGGED_REJECTS:
        log.warning("... and %d more %ss set aside", len(rejects) - MAX_LOGGED_REJECTS, what)


def _metrics(scores, params: ScoreParams, extra: dict) -> dict:
    for warning in extra.get("warnings", ()):
        log.warning("%s", warning)
    means = system_means(scores, params)
    systems: dict = {}
    for row in means.itertuples(index=False):
        systems.setdefault(row.system, {})[row.metric] = {
            "mean": row.mean, "ci_low": row.ci_low, "ci_high": row.ci_high, "n": int(row.n)
        }
    out = {
        "systems": systems,
        "n_documents": int(scores["id"].nunique()),
        "bootstrap": {"resamples": params.resamples, "seed": params.seed, "level": params.level},
        "reference_format": params.reference_format,
        "summary_format": params.summary_format,
        **extra,
    }
    if len(systems) == 1:  # one system: its means are the headline numbers
        (only,) = systems.values()
        out.update({metric: only[metric]["mean"] for metric in ROUGE_TYPES})
    return out


def _left_out_warnings(split_rejected: int, split_rejects: str | None, missing: int, rejected: int) -> list[str]:
    """Warnings counting the documents the scores leave out under input.on_bad_record: skip,
    and saying where each is named: metrics.json counts them, but `make evaluate-summaries`
    prints only its warnings."""
    out = []
    if split_rejected:
        out.append(
            f"the scores leave out {split_rejected} of the input's records: the split set them aside "
            f"(input.on_bad_record: skip) and nothing summarised them; {split_rejects} lists each, with why"
        )
    if missing or rejected:
        out.append(
            f"the scores leave out {missing} of the summarised documents: they have no usable reference "
            f"(input.on_bad_record: skip); the job's log names each, and the reference records set aside "
            f"({rejected}) with why, the first {MAX_LOGGED_REJECTS} of each"
        )
    return out


def plot_rouge(scores, path: str) -> None:
    """Per-document ROUGE distributions, one panel per metric, a box per system."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(ROUGE_TYPES), figsize=(3.2 * len(ROUGE_TYPES), 3.4), sharey=True)
    systems = list(dict.fromkeys(scores["system"]))
    for ax, metric in zip(axes, ROUGE_TYPES, strict=True):
        data = [scores.loc[scores["system"] == s, metric].to_numpy() for s in systems]
        ax.boxplot(data, tick_labels=systems, showmeans=True)
        ax.set_title(metric)
        ax.tick_params(axis="x", rotation=30)
    axes[0].set_ylabel("F1 x 100 per document")
    save_figure(fig, path)


def source_key(path: str) -> str:
    """A source file as the split's rejects name it, to match them with: core.s3.logical_path
    (in S3 storage the object's URL or the workflow's path, not the local copy this job
    reads), a local path resolved."""
    name = logical_path(path)
    return name if "://" in name else os.path.realpath(name)


def split_rejected_lines(rejects_path: str | None) -> dict[str, frozenset[int]]:
    """{source_key: lines} the split set aside (its rejects.jsonl): those records were
    never summarised, so their lines hold no reference to score against."""
    lines: dict[str, set[int]] = {}
    if rejects_path:
        # core.files.iter_json_lines: a damaged line names the file and line (json's own error named neither)
        for _, row in iter_json_lines(rejects_path):
            if row.get("line") is not None:
                lines.setdefault(source_key(row["source"]), set()).add(int(row["line"]))
    return {source: frozenset(found) for source, found in lines.items()}


def evaluate_summaries(
    summaries_path: str,
    sources: list[str],
    params: ScoreParams,
    outputs: dict,
    system: str = "summary",
    split_rejects: str | None = None,
) -> Scored:
    """Score the workflow's merged summaries; write outputs: metrics, per_document, figure.

    `split_rejects`: the split's rejects.jsonl. Each summarised id was read from one line,
    the first the split accepted; its reference is read from that same line, never from
    a line the split rejected (an earlier line with that id but an empty text, or a later
    duplicate holding another article's reference)."""
    references, rejects = {}, []
    rejected = split_rejected_lines(split_rejects)
    for path in sources:
        reading = read_references(
            path,
            id_field=params.id_field,
            reference_field=params.reference_field,
            on_bad_record=params.on_bad_record,
            passed_over=rejected.get(source_key(path), frozenset()),
            max_record_bytes=params.max_record_bytes,
        )
        for d in reading.records:
            references[d.id] = d.reference
        rejects += reading.rejects
    log_rejects(rejects, "reference")
    # The summaries are read twice, so that no more than one is held: this pass checks
    # them all and finds those without a reference before any is scored (a damaged line,
    # or a missing reference under on_bad_record: error, stops the job before hours of
    # scoring); the next scores each as it is joined.
    missing, joined = [], 0
    for rec in iter_summaries(summaries_path):
        if rec["id"] in references:
            joined += 1
        else:
            missing.append(rec["id"])
    if missing and params.on_bad_record == "error":
        raise MissingReferenceError(
            f"{len(missing)} summarised documents have no usable reference field "
            f"{params.reference_field!r} in {', '.join(sources)} (first: {missing[:5]})"
        )
    if not joined:
        raise MissingReferenceError(f"no summarised document has a reference in {', '.join(sources)}")
    for doc_id in missing[:MAX_LOGGED_REJECTS]:
        log.warning("summarised document %r has no usable reference: left out of the scores", doc_id)
    if len(missing) > MAX_LOGGED_REJECTS:
        log.warning("... and %d more summarised documents without a usable reference", len(missing) - MAX_LOGGED_REJECTS)
    split_rejected = sum(len(lines) for lines in rejected.values())
    table, warnings = ScoreTable(params), FormatWarnings(params, own_summaries=True)
    lengths = array("d")  # (input, output) tokens of each document scored, as floats
    for rec in iter_summaries(summaries_path):
        if rec["id"] not in references:
            continue
        record = SummaryRecord(rec["id"], references[rec["id"]], {system: rec["summary"]}, 0)
        table.add(record)
        warnings.add(record)
        lengths.extend((rec["input_tokens"], rec["output_tokens"]))
    del references  # the references' texts go before the table's frame and the bootstrap
    scores = table.frame()
    inp, outp = np.frombuffer(lengths, dtype=np.float64).reshape(-1, 2).T
    metrics = _metrics(
        scores,
        params,
        {
            "reference_field": params.reference_field,
            # input records the split set aside (its rejects.jsonl): never summarised,
            # so in none of the counts below
            "split_rejected_records": split_rejected,
            "documents_without_reference": len(missing),
            "rejected_references": len(rejects),
            "summary_tokens_mean": float(outp.mean()),
            "compression_ratio_mean": float(np.mean(outp / np.maximum(inp, 1))),
            "warnings": [
                *warnings.warnings(),
                *_left_out_warnings(split_rejected, split_rejects, len(missing), len(rejects)),
            ],
        },
    )
    write_parquet(scores, outputs["per_document"])
    write_json(outputs["metrics"], metrics)
    plot_rouge(scores, outputs["figure"])
    log.info("ROUGE over %d documents: %s", metrics["n_documents"], {m: round(metrics[m], 2) for m in ROUGE_TYPES})
    return Scored(metrics, rejects)


def score_stored(sources: list[str], stored_field: str, params: ScoreParams, outputs: dict) -> Scored:
    """Method `stored`: score summaries already in the input (one or several systems).
    The source files are one input: an id twice, in one file or two, is a duplicate
    (counted once, never twice in the means), and every system is scored on the same
    documents (summarise.data)."""
    scored = score_jsonl(sources, stored_field, params)
    scores, rejects = scored.scores, scored.rejects
    log_rejects(rejects, "record")
    if scores.empty:
        raise ValueError(f"no record with summaries {stored_field!r} and references in {', '.join(sources)}")
    warnings = list(scored.warnings)
    if rejects:
        warnings.append(
            f"the scores leave out {len(rejects)} of the input's records, in every system: they were set aside "
            f"(input.on_bad_record: skip); the job's log names each (the first {MAX_LOGGED_REJECTS}), with why"
        )
    metrics = _metrics(scores, params, {"stored_field": stored_field, "rejected_records": len(rejects),
                                        "warnings": warnings})
    write_parquet(scores, outputs["per_document"])
    write_json(outputs["metrics"], metrics)
    plot_rouge(scores, outputs["figure"])
    return Scored(metrics, rejects)
