"""The metrics each stage's sweep job writes, so that a sweep's `metrics:` is checked
when the workflow parses, not by the collection after every job has run.

A name is a numeric key of the job's metrics JSON, nested keys joined with "." (as
table.flatten_metrics reads them). No stage keeps a list of its keys that this layer
may import (shardflow.sweep imports only core and corpus), and training has none at
all: its record is a dict literal at the end of shardflow.train.trainer.train. So the
lists are written out here, from the writers:

- train: shardflow.train.trainer.train's `metrics` (mfu and tokens_per_second may be
  null, as may a diverged run's losses and, on the CPU, the peak GPU memory: the run has
  no value there, table.flatten_metrics, but the name is right);
- retrieval: shardflow.retrieval.pipeline.search_and_score: HEADLINE, its counts, and
  `all.<measure>_at_<k>` for shardflow.retrieval.metrics METRICS x MTEB_K_VALUES;
- summarise: shardflow.summarise.evaluate._metrics and evaluate_summaries: the
  headline ROUGE_TYPES (one system: the method), `systems.<method>.<rouge>.<stat>`,
  the bootstrap settings and the counts; under method stored, score_stored: its
  systems named by the field (`summary_systems`), its own counts, the headline where
  it scores one system;
- embed: shardflow.embed.measure.run_metrics: speed, GPU-hours, the largest chunk
  job's peak GPU memory, and `agreement.<name>`
  (cosine with the main run's vectors) where the point loads the main run's model; and
  the cost the collection adds to each record (cost.COST_METRICS, cost.with_cost).

The summarisation stage's summary.json (SUMMARY_REPORT), which no sweep job writes, is
listed here too: a reproduction of summaries without references reads it.

tests/unit/sweep/test_metrics.py runs the retrieval, ROUGE and summary writers on tiny inputs
(tests/unit/embed/test_measure.py the embed one, priced as the collection prices it)
and tests/workflow/test_sweep_e2e.py reads real training records: a writer that adds,
renames or drops a key fails them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from shardflow.core.models import same_model
from shardflow.sweep.cost import COST_METRICS
from shardflow.sweep.spec import SweepSpec
from shardflow.sweep.table import RUN_COLUMNS

TRAIN = (
    "best_val_loss", "best_step", "final_val_loss", "final_train_loss", "steps", "resumed_from_step",
    "train_tokens", "unsampled_train_tokens",
    "tokens_per_step", "micro_batch", "grad_accum", "config_micro_batch", "config_grad_accum",
    "tokens_per_second", "wall_seconds", "train_seconds_total", "flops_per_token", "mfu",
    "n_params", "world_size", "peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib",
)
RETRIEVAL_HEADLINE = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")
RETRIEVAL_COUNTS = ("n_queries", "n_queries_not_in_run", "n_documents", "judged_documents_not_in_corpus", "top_k")
RETRIEVAL_MEASURES = ("ndcg", "map", "recall", "precision", "mrr")
# The measures retrieval.relevance_level decides (shardflow.retrieval.metrics.LEVELLED_METRICS);
# nDCG reads the grades themselves.
RETRIEVAL_LEVELLED = ("map", "recall", "precision", "mrr")
RETRIEVAL_KS = (1, 3, 5, 10, 20, 100, 1000)
ROUGE = ("rouge1", "rouge2", "rougeL", "rougeLsum")
ROUGE_STATS = ("mean", "ci_low", "ci_high", "n")
SUMMARY_COUNTS = (
    "n_documents", "documents_without_reference", "split_rejected_records", "rejected_references", "summary_tokens_mean",
    "compression_ratio_mean", "bootstrap.resamples", "bootstrap.seed", "bootstrap.level",
)
# Method stored scores summaries already in the input: no split, no token counts.
STORED_COUNTS = ("n_documents", "rejected_records", "bootstrap.resamples", "bootstrap.seed", "bootstrap.level")
EMBED = (
    "records", "records_resumed", "tokens", "chunks", "items_per_s", "tokens_per_s", "steady_items_per_s",
    "steady_tokens_per_s", "job_items_per_s", "encode_seconds", "warmup_seconds", "job_seconds", "wall_seconds",
    "padding_fraction", "oom_backoffs", "max_rss_mb", "gpu_hours", "earlier_attempts", "earlier_attempt_seconds",
    "records_paid", "dim", "peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib",
)
EMBED_AGREEMENT = ("agreement.cosine_min", "agreement.cosine_mean", "agreement.cosine_p1", "agreement.rows")
# The summarisation stage's summary (results/<dataset>/summarise/report/summary.json,
# shardflow.summarise.report.run_summary), which a reproduction of summaries without
# references reads: no sweep job writes it. Its earlier_attempt_devices are keyed by the
# devices killed attempts ran on, which the data decides, not the config: not listed.
SUMMARY_REPORT = (
    "records", "records_resumed", "rejected_records", "chunks", "input_tokens", "summary_tokens", "compression_ratio",
    "truncated_inputs", "summarise_wall_time_s", "summarise_job_seconds", "items_per_s", "gpu_hours", "estimated_cost", "earlier_attempts",
    "earlier_attempt_seconds", "earlier_attempt_gpu_hours", "peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib",
    "peak_gpu_mem_chunk", "peak_gpu_mem_unrecorded",
)
# Null where the jobs run on the CPU: a sweep ranked by one would fail in its collection,
# after every job ran (core.devices.peak_memory: the job's, the largest rank's or chunk job's).
GPU_ONLY = ("mfu", "peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib")


def summary_systems(config: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The systems a ROUGE record scores, named as its writer names them: the method, for
    the workflow's own summaries (rule evaluate_summaries); under method stored the last
    part of summarise.stored_field ("summary"; "a.b": "b"; shardflow.summarise.data), or
    None for "a.*", whose systems are that object's keys in the input."""
    summarise = config["summarise"]
    if summarise["method"] != "stored":
        return (summarise["method"],)
    field = summarise["stored_field"]
    return None if field.endswith(".*") else (field.rsplit(".", 1)[-1],)


def stage_metrics(
    stage: str, config: Mapping[str, Any], systems: Iterable[str] | None = None
) -> tuple[str, ...] | None:
    """Every name a `stage` job's metrics can hold under `config` (the sweep's base);
    None for a stage without workflow rules (nothing to check against), or for a
    summarise stage whose systems are the input's ("a.*") where `systems` does not give
    them."""
    # mfu (no GPU peak to compare with) and the peak GPU memory are null where the
    # device is the CPU: GPU_ONLY.
    on_cpu = config.get("gpu_jobs", {}).get("device") == "cpu"
    if stage == "train":
        return tuple(m for m in TRAIN if not (on_cpu and m in GPU_ONLY))
    if stage == "retrieval":
        scores = tuple(f"all.{m}_at_{k}" for m in RETRIEVAL_MEASURES for k in RETRIEVAL_KS)
        return RETRIEVAL_HEADLINE + RETRIEVAL_COUNTS + scores
    if stage == "summarise":
        systems = tuple(systems) if systems is not None else summary_systems(config)
        if not systems:
            return None
        per_system = tuple(f"systems.{system}.{r}.{s}" for system in systems for r in ROUGE for s in ROUGE_STATS)
        headline = ROUGE if len(systems) == 1 else ()  # several systems: no one of them is the headline
        counts = STORED_COUNTS if config["summarise"]["method"] == "stored" else SUMMARY_COUNTS
        return headline + counts + per_system
    if stage == "embed":
        return tuple(m for m in EMBED if not (on_cpu and m in GPU_ONLY)) + COST_METRICS + EMBED_AGREEMENT
    return None


def summary_report_metrics(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Every name the summarisation stage's summary.json can hold under `config`: the
    largest job's peak GPU memory and its chunk are null where the jobs run on the CPU
    (gpu_jobs.device cpu, or method lead, whose jobs ask for no GPU)."""
    on_cpu = config["gpu_jobs"]["device"] == "cpu" or config["summarise"]["method"] == "lead"
    return tuple(m for m in SUMMARY_REPORT if not (on_cpu and (m in GPU_ONLY or m == "peak_gpu_mem_chunk")))


def describe(names: Iterable[str]) -> str:
    """The names, nested ones summarised per first component ("all.* (35 names)")."""
    names = list(names)
    top = [n for n in names if "." not in n]
    nested: dict[str, list[str]] = {}
    for name in names:
        if "." in name:
            nested.setdefault(name.split(".", 1)[0], []).append(name)
    groups = [f"{prefix}.* ({len(sub)} names, e.g. {sub[0]})" for prefix, sub in nested.items()]
    return ", ".join(top + groups)


def unknown_metrics(spec: SweepSpec) -> list[str]:
    """One line per metric of `spec` that its stage's jobs do not write, or that is one of
    the runs table's own columns (table.RUN_COLUMNS)."""
    known = stage_metrics(spec.stage, spec.base_config)
    if known is None:
        return []
    problems = []
    article = "an" if spec.stage[0] in "aeiou" else "a"
    for metric in spec.metrics:
        if metric in RUN_COLUMNS:
            # an embed job writes gpu_hours, but the runs table holds the collection's own
            # column of that name: table.collect would stop after every job ran
            problems.append(
                f"sweep '{spec.name}': metric '{metric}' is a column the collection writes for every run "
                f"({', '.join(RUN_COLUMNS)}), not one a sweep can rank by; "
                + ("estimated_cost ranks by the same GPU-hours" if spec.stage == "embed" and metric == "gpu_hours"
                   else "choose another metric")
            )
            continue
        if metric in known:
            continue
        close = difflib.get_close_matches(metric, known, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        problems.append(
            f"sweep '{spec.name}': metric '{metric}' is not one {article} {spec.stage} job writes{hint} "
            f"(its metrics: {describe(known)})"
        )
    return problems


def loads_model(spec: SweepSpec, point: str, model: str) -> bool:
    """Whether an embed sweep's point loads `model` (the main run's): the same value, or
    another spelling of it ("default" and the bundled folder, a trailing slash, ...)."""
    return same_model(spec.job_config(point, spec.seeds[0])["embedding"]["model"], model)


def incomparable_points(spec: SweepSpec, main_model: str) -> list[str]:
    """One line where an embed sweep shows an agreement metric but a point loads another
    model than the main run (`main_model`): its vectors compare with nothing, and the
    collection would find the metric missing after every job ran."""
    shown = [m for m in spec.metrics if m.startswith("agreement.")]
    if spec.stage != "embed" or not shown:
        return []
    other = [pid for pid in spec.ids if not loads_model(spec, pid, main_model)]
    if not other:
        return []
    return [
        f"sweep '{spec.name}': {', '.join(shown)} compares each point's vectors with the main run's "
        f"(embedding.model {main_model!r}), but {'points' if len(other) > 1 else 'point'} {', '.join(other)} "
        f"{'load' if len(other) > 1 else 'loads'} another model; drop the agreement metrics, or sweep one model "
        "at a time"
    ]
