"""The first screen of report.html: per stage that ran, what a user checks first.

Snakemake's report opens on its global description (the `report:` statement). The
`landing` rule writes it from the small records every stage already keeps, one
section per stage and data set:

- embedding: records in (read: kept / rejected), rows out and whether verification
  passed, wall time, throughput (and how many jobs made it at once), GPU-hours and
  estimated cost, peak GPU memory;
- retrieval evaluation: the headline metrics and query / document counts;
- neighbours: documents searched, the nearest scores' spread, near-duplicate pairs and
  groups, and what keeping one a group drops;
- search: queries searched, against how many documents, the best hits' scores, where
  the hits are;
- summarisation: records in and out, truncated inputs, lengths and compression,
  wall time, throughput, GPU-hours and cost, peak GPU memory, and ROUGE with
  intervals when scored;
- training: documents and tokens in (train / val), shards, tokenizer, steps, best
  validation loss, wall time, tokens/s (MFU on CUDA), GPU-hours and cost on CUDA,
  peak GPU memory; the micro-batch where it was not the config's (after running out
  of memory: the same global batch, in more micro-steps).

Peak GPU memory is the largest job's (or rank's) own peak: what a GPU must hold to
run it (core.devices.peak_memory), "not on a GPU" where the jobs ran on the CPU.

A new capability adds a `<stage>_section` function here and its files to the
rule's input; `render` lays every section out the same way.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shardflow.core.atomic import atomic_open
from shardflow.core.files import read_json
from shardflow.core.jobs import (
    finished_job_gpu_hours,
    money,
    priced,
    read_benchmark,
    read_job_table,
    significant,
)
from shardflow.embed.report import ReportParams, run_summary
from shardflow.sweep.export import drawn_from, level_phrase, table_value, value_label
from shardflow.sweep.table import read_table
from shardflow.train.params import batch_note


@dataclass(frozen=True)
class Section:
    title: str
    rows: list[tuple[str, str]]


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _many(n: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, agreeing: '1 pair', '2 pairs', '1,000 documents' ('2 queries'
    given the plural)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _spread(q: dict, of: str) -> str:
    """A summary's score quantiles (score_quantiles: median, p01, p99) in words, `of` the
    scored things: 'median 0.812, 1% of queries below 0.540, 1% above 0.975'."""
    return f"median {q['median']:.3f}, 1% of {of} below {q['p01']:.3f}, 1% above {q['p99']:.3f}"


def records_in(manifest: dict) -> str:
    """'38 read: 30 kept, 8 rejected' from a split manifest (its total_records are the kept)."""
    kept, rejected = manifest["total_records"], manifest.get("rejected_records", 0)
    return f"{kept + rejected:,} read: {kept:,} kept, {rejected:,} rejected"


def embedding_section(dataset: str, files: dict, report: ReportParams) -> Section:
    """files: manifest, jobs, verification."""
    manifest, verification = read_json(files["manifest"]), read_json(files["verification"])
    jobs = read_job_table(files["jobs"])
    s = run_summary([j["stats"] for j in jobs], [j["benchmark"] for j in jobs], manifest, verification, report)
    rows = [
        ("records in", records_in(manifest)),
        ("records out", f"{verification['rows']:,} x {verification['dim']} ({verification['dtype']}), "
         f"verification {'passed' if verification['ok'] else 'FAILED'}"
         + (f"; {s['texts_at_max_length']:,} texts reached the model's max length (those longer were cut: only "
            "their head was embedded)" if s.get("texts_at_max_length") else "")),
        # Encoding: the time during which at least one job was encoding (core.jobs.job_costs:
        # gaps with none, such as another stage's turn, do not count); the jobs' own
        # times (Snakemake's benchmarks) add model loading and start-up.
        ("wall time", f"{_duration(s['embed_wall_time_s'])} encoding ({_many(s['chunks'], 'chunk job')}, "
         f"{_duration(s['embed_job_seconds'])} of job time in all, model loading included)"),
        ("throughput", f"{s['items_per_s']:,.1f} records/s, {s['tokens_per_s']:,.0f} tokens/s while encoding "
         f"on {', '.join(s['devices'])}" + _at_once([j["stats"] for j in jobs]) + (
             f" ({s['records_resumed']:,} records came from resumed parts of killed attempts, whose time and "
             "tokens these rates do not count)" if s.get("records_resumed") else "")),
        ("GPU-hours and cost", f"{s['gpu_hours']:.4f} GPU-h, {money(s['estimated_cost'])} {s['currency']} " + (
            "(every record came from resumed parts: no cost per record)"
            if s["estimated_cost_per_million_records"] is None
            # money, as the cost beside it: a cheap run's under half a cent read 0.00, as if free
            else f"({money(s['estimated_cost_per_million_records'])} per million records computed)")
         + _killed_attempts(s, resumed=s.get("records_resumed", 0))),
        ("peak GPU memory", _stage_peak_memory(s)),
    ]
    return Section(f"Embedding: {dataset}", rows)


def _at_once(stats: list[dict]) -> str:
    """How many chunk jobs encoded at once at most (from their start_time and end_time),
    where more than one did. The rates are the stage's records over the time any job
    encoded, so N jobs at once give about N times one job's; and a job pinned to its own
    GPU sees it as cuda:0, so "on cuda:0" alone read as one GPU's rate."""
    events = sorted([(s["start_time"], 1) for s in stats] + [(s["end_time"], -1) for s in stats])
    running = most = 0
    for _, step in events:  # at a tie an end sorts first: a job starting as another ends is not at once
        running += step
        most = max(most, running)
    if most < 2:
        return ""
    return f", up to {most:,} chunk jobs at once: the rates are theirs together, not one job's or one device's"


def _peaks(allocated: float, reserved: float | None) -> str:
    text = f"{allocated:,.0f} MiB allocated"
    return text + (f", {reserved:,.0f} MiB reserved" if reserved is not None else "")


def _stage_peak_memory(s: dict) -> str:
    """The largest peak GPU memory of a stage's chunk jobs and the chunk whose job had it
    (core.jobs.peak_gpu_memory, in a stage's summary)."""
    if not any(str(d).startswith("cuda") for d in s["devices"]):
        return "not on a GPU"
    unrecorded = s.get("peak_gpu_mem_unrecorded", 0)
    if s.get("peak_gpu_mem_mib") is None:
        return "not recorded (the jobs ran before shardflow recorded it)"
    text = _peaks(s["peak_gpu_mem_mib"], s.get("peak_gpu_mem_reserved_mib"))
    text += (f" by the job of chunk {s['peak_gpu_mem_chunk']}, the largest of the {s['chunks']:,} jobs' peaks"
             if s["chunks"] > 1 else f" by its one job (chunk {s['peak_gpu_mem_chunk']})")
    if unrecorded:
        text += f"; {unrecorded:,} of the jobs ran before shardflow recorded it and are not counted"
    return text


def _killed_attempts(s: dict, resumed: int = 0) -> str:
    """What the GPU-hours and cost count of the jobs' killed attempts (core.jobs.job_costs)."""
    if s.get("earlier_attempts"):
        # By device where the file says (a stage's summary since it does; not a sweep's cost.json).
        devices = (s.get("earlier_attempt_devices") or {}).items()
        on = "on " + ", ".join(f"{device} for {_duration(t)}" for device, t in devices) + "; " if devices else ""
        return (f"; {_duration(s['earlier_attempt_seconds'])} of {s['earlier_attempts']:,} killed attempts counted "
                f"({on}{s['earlier_attempt_gpu_hours']:.4f} GPU-h; a lower bound: from each one's start to its "
                "last saved part)")
    if resumed:
        return "; the killed attempts left no records (from before attempt records): their cost is not counted"
    return ""


def retrieval_section(dataset: str, files: dict) -> Section:
    """files: metrics."""
    from shardflow.retrieval.pipeline import beyond_ranking_depth

    m = read_json(files["metrics"])
    beyond = beyond_ranking_depth(m)  # computed on a ranking shallower than their k
    headline = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")
    rows = [(key.replace("_at_", "@") + (" †" if key in beyond else ""), f"{m[key]:.5f}") for key in headline]
    # Away from 1 (recorded only there) the binary metrics are not MTEB's for the same run.
    level = m.get("relevance_level", 1)
    graded = (f"; recall, MRR and MAP count grades of {level} and above as relevant (retrieval.relevance_level), "
              "nDCG the grades themselves") if level != 1 else ""
    rows.append(("evaluated", f"{m['n_queries']:,} queries against {m['n_documents']:,} documents "
                 f"(exact top-{m['top_k']}){graded}"))
    if beyond:
        deeper = sorted({int(name.rsplit("_at_", 1)[1]) for name in beyond})
        note = (
            f"{len(beyond)} metrics in metrics.json are at a k deeper than the top-{m['top_k']} ranking "
            f"(k = {', '.join(map(str, deeper))}: {', '.join(beyond[:2])}, ...): computed on those hits, they are "
            f"not the metric at k (metrics.json: beyond_ranking_depth; retrieval.top_k {deeper[-1]} gives them)"
        )
        rows.append(("† beyond the ranking", note))
    return Section(f"Retrieval evaluation: {dataset}", rows)


def neighbours_section(dataset: str, files: dict) -> Section:
    """files: summary (merge_neighbours'), jobs (the chunk jobs' table)."""
    s = read_json(files["summary"])
    rows = read_job_table(files["jobs"])
    devices = sorted({str(r["stats"]["device"]) for r in rows})
    seconds = sum(float(r["stats"]["seconds"]) for r in rows)
    listed = min(s["k"], s["documents"] - 1)  # a document lists only the others (chunk_neighbours)
    what = f"the {listed} nearest of each among the others" if listed > 0 else "none other to search among"
    out = [("searched", f"{_many(s['documents'], 'document')}, {what} (exact, {s['similarity']}), "
                        f"{seconds:,.1f} s over {_many(len(rows), 'chunk job')} on {', '.join(devices)}")]
    if s["nearest_score"]:
        out.append(("nearest score", _spread(s["nearest_score"], "documents")))
    out.append(("near-duplicates", f"{_many(s['near_duplicate_pairs'], 'pair')} scoring {s['duplicate_threshold']:g} "
                                   f"or more, in {_many(s['groups'], 'group')} (the largest {s['largest_group']:,}); "
                                   f"keeping one a group drops {_many(s['documents_to_drop'], 'document')} "
                                   f"({s['share_to_drop']:.2%})"))
    if s["saturated"]:
        one = s["saturated"] == 1
        whose = "its" if one else "their"
        held = f"all {s['k']} neighbours" if s["k"] != 1 else f"{whose} one neighbour"
        out.append(("groups may be larger", f"{_many(s['saturated'], 'document')} {'has' if one else 'have'} {held} "
                                            f"at or above the threshold: a larger neighbours.k finds {whose} other "
                                            "twins"))
    return Section(f"Neighbours: {dataset}", out)


def search_section(dataset: str, files: dict) -> Section:
    """files: summary and stats (the search job's)."""
    s = read_json(files["summary"])
    stats = read_json(files["stats"])
    out = [("searched", f"{_many(s['queries'], 'query', 'queries')} against {_many(s['documents'], 'document')}, "
                        f"the {s['k']:,} nearest of each (exact, {s['similarity']}), {float(stats['seconds']):,.1f} s "
                        f"on {s['device']}")]
    if s["best_score"]:
        out.append(("best hit's score", _spread(s["best_score"], "queries")))
    out.append(("hits", f"results/{dataset}/search/hits.parquet: {_many(s['hits'], 'row')} (query_id, rank, id, "
                        "score, row)"))
    return Section(f"Search: {dataset}", out)


def summarisation_section(dataset: str, files: dict) -> Section:
    """files: manifest, and summary (the stage's report) and/or metrics (ROUGE)."""
    manifest = read_json(files["manifest"])
    rows = []
    if "summary" in files:
        s = read_json(files["summary"])
        rows += [
            ("records in", records_in(manifest)),
            ("summaries out", f"{s['records']:,}, {s['truncated_inputs']:,} inputs truncated to the model's limit"),
            # Totals over all documents (a model's tokens, inputs as truncated; words for lead and
            # extractive: length_unit, unrecorded before 2026-11-28); metrics.json's
            # compression_ratio_mean is the mean of per-document ratios.
            ("lengths", f"{s['input_tokens']:,} input and {s['summary_tokens']:,} summary "
             f"{s.get('length_unit', 'tokens (words for lead and extractive)')} "
             f"(compression {s['compression_ratio']:.3f}: all summaries over all inputs)"),
            ("wall time", f"{_duration(s['summarise_wall_time_s'])} summarising ({_many(s['chunks'], 'chunk job')}, "
             "model loading not included)"),
            # records_resumed: documents of resumed parts (summary.json since 2026-11-28), which
            # the rate, counting what the jobs summarised (core.jobs.items_computed), leaves out.
            ("throughput", f"{s['items_per_s']:,.2f} documents/s while summarising on {', '.join(s['devices'])}" + (
                f" ({s['records_resumed']:,} documents came from resumed parts of killed attempts, whose time "
                "this rate does not count)" if s.get("records_resumed") else "")),
            ("GPU-hours and cost", f"{s['gpu_hours']:.4f} GPU-h, {money(s['estimated_cost'])} {s['currency']}"
             + _killed_attempts(s, resumed=s.get("records_resumed", 0))),
            ("peak GPU memory", _stage_peak_memory(s)),
        ]
    if "metrics" in files:
        m = read_json(files["metrics"])
        for system, scores in m["systems"].items():
            cells = ", ".join(
                f"{metric} {v['mean']:.2f} [{v['ci_low']:.2f}, {v['ci_high']:.2f}]" for metric, v in scores.items()
            )
            rows.append((f"ROUGE {system}", cells))
        rows.append(("evaluated", f"{m['n_documents']:,} documents (F1 x 100, bootstrap 95% intervals)"))
    return Section(f"Summarisation: {dataset}", rows)


def sweep_section(name: str, files: dict) -> Section:
    """files: best (best.json), points (points.json), cost (cost.json) and summary
    (summary.parquet) of a sweep's collection. A sampled sweep's (points.json's `sample`)
    says its points were drawn at random, with which seed, and what from."""
    best, points, cost = read_json(files["best"]), read_json(files["points"]), read_json(files["cost"])
    params = ", ".join(f"{k}={value_label(v)}" for k, v in best["params"].items()) or "(base)"
    # The best value as table.md prints its cell: the column's decimals, from every point's
    # mean (export.table_value). `:.4g` gave 40.39 for the table's 40.389, 4.568e+04 for
    # 45678.900, and 1 ± 1.414e-05 for a cosine the table tells apart as 1.0000 ± 0.0000.
    means = read_table(files["summary"])[f"{best['metric']}_mean"]
    value = table_value(means, best["mean"], best.get("std"), money=bool(best.get("currency")))
    value += f" {best['currency']}" if best.get("currency") else ""  # a cost metric of a priced sweep
    # A value computed on a ranking shallower than its k (a retrieval sweep's top_k 100 and an @1000).
    shallow = "; computed on a ranking shallower than its k (retrieval.top_k): not the metric at k"
    shallow = shallow if best.get("beyond_ranking_depth") else ""
    # A retrieval sweep scored away from relevance_level 1 (best.json's relevance_levels: the
    # best point's, none at 1) names its level where it decides the metric: "relevance >= 2".
    level = level_phrase(best["metric"], {best["point"]: best.get("relevance_levels", ())})
    level = f"{level}; " if level else ""
    sample = points.get("sample")
    drawn = f" drawn at random (sample seed {sample['seed']})" if sample else ""
    varied = ", ".join(points["params"]) or "seeds only"
    # What each parameter was drawn from; a points.json from before the sample named its grid: the names.
    if sample and sample.get("grid"):
        varied = "; ".join(drawn_from(sample, key, key) for key in points["params"])
    rows = [
        ("stage", f"{points['stage']}: {len(points['points']):,} points{drawn} x {len(points['seeds']):,} seeds"),
        ("varied", varied),
        (f"best {best['metric']} ({level}{best['goal']})", f"{value} at {params}{shallow}"),
        ("cost", _sweep_cost(cost)),
    ]
    return Section(f"Sweep: {name}", rows)


def _sweep_cost(cost: dict) -> str:
    """'10 jobs, 0.42 GPU-hours, 1,512 s of job time (each once; of them read: 3 of the
    main run's, 3 shared)', and what the GPU-hours count of killed attempts, as a
    stage's line says it. A priced sweep's (an embed sweep's cost.json holds its price)
    says what they cost, in its currency: '0.42 GPU-hours (1.05 USD at 2.5 USD per
    GPU-hour)'."""

    hours = cost["gpu_hours"]
    # Fixed point, as make estimate prints GPU-hours: a CPU-sized sweep's 0.00005, not 5e-05.
    text = f"{_many(cost['jobs'], 'job')}, {significant(hours, 3, grouped=True)} GPU-hours"
    if "estimated_cost" in cost:
        currency = cost["currency"]
        text += f" ({money(cost['estimated_cost'])} {currency} at {cost['gpu_hour_price']:g} {currency} per GPU-hour)"
    text += f", {cost['wall_time_s']:,.0f} s of job time"
    read = [(cost["by_origin"][k]["jobs"], what) for k, what in (("main_run", "of the main run's"), ("shared", "shared"))]
    read = [f"{n:,} {what}" for n, what in read if n]
    text = f"{text} (each once; of them read: {', '.join(read)})" if read else text
    return text + _killed_attempts(cost)  # a cost.json from before attempt records has no such keys: none said


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(text: str) -> str:
    """A value (a data set name, a sweep's parameter values, a device) as literal text of
    the page: `snakemake --report` renders results/report.rst with Jinja2 first and
    docutils second, and docutils escapes <, > and & in what it writes, so what is left
    is to keep a value from being read as markup by either:

    - one line: a newline could end the table and start a directive (`.. raw:: html`);
    - a backslash before a first character that is not a letter or digit: a cell
      is parsed on its own, and `.. include:: /etc/passwd` alone in one is a directive;
    - inline markup characters escaped, and a colon followed by a non-space, so that
      `javascript:alert(1)` is no link;
    - no Jinja2 delimiter (`{{`, `{%`, `{#`): an escaped space after the brace, which
      docutils drops.
    """
    text = " ".join(_CONTROL.sub(" ", text).split())
    for ch in "\\*`|_":
        text = text.replace(ch, "\\" + ch)
    text = re.sub(r":(?=\S)", r"\\:", text)
    text = re.sub(r"\{(?=[{%#])", r"{\\ ", text)
    if text and not text[0].isalnum() and text[0] != "\\":
        text = "\\" + text
    return text


def _columns(text: str) -> int:
    """The columns docutils gives `text` in a table or under a title (docutils.utils.
    column_width): an East Asian wide or fullwidth character takes two, others one, less
    one for a combining character: an accent written after its letter takes none, and a
    wide combining mark (U+3099, the voicing mark of Japanese in decomposed form) one, as
    docutils' tables also count it (a pad after each wide character, combining ones then
    dropped). A key is padded, and a title underlined, by columns, not characters: a
    stored system's name ("ROUGE 要約") padded by characters ran into the value's column,
    and docutils showed an error for the table."""
    return sum(
        (2 if unicodedata.east_asian_width(ch) in "WF" else 1) - (1 if unicodedata.combining(ch) else 0)
        for ch in text
    )


def _split_at_column(row: str, width: int) -> tuple[str, str] | None:
    """`row` cut after its first `width` columns (with any characters of no column that
    follow), or None where a wide character straddles the cut."""
    used = 0
    for i, ch in enumerate(row):
        if used >= width and _columns(ch):
            return (row[:i], row[i:]) if used == width else None
        used += _columns(ch)
    return (row, "") if used <= width else None


_HEADER = [
    "shardflow run",
    "=============",
    "",
    "What to check first, per stage that ran. Figures, per-chunk timings and provenance",
    "are in the categories below; results/<dataset>/ holds the files.",
    "",
]
_RULE = re.compile(r"(=+) (={60})")


def render(sections: list[Section]) -> str:
    lines = list(_HEADER)
    for section in sections:
        title = _escape(section.title)
        lines += [title, "-" * _columns(title), ""]
        rows = [(_escape(k), _escape(v)) for k, v in section.rows]
        width = max(_columns(k) for k, _ in rows)
        rule = "=" * width + " " + "=" * 60
        lines += [rule]
        lines += [f"{k}{' ' * (width - _columns(k))} {v}" for k, v in rows]
        lines += [rule, ""]
    return "\n".join(lines)


def _is_escaped(text: str) -> bool:
    """Whether `text` could be what _escape wrote: literal text for Jinja2 and docutils."""
    if _CONTROL.search(text) or (text and not (text[0].isalnum() or text[0] == "\\")):
        return False
    i = 0
    while i < len(text):
        ch, after = text[i], text[i + 1 : i + 2]
        if ch == "\\":
            if not after:
                return False
            i += 2
            continue
        if ch in "*`|_" or (ch == ":" and after and not after.isspace()) or (ch == "{" and after in ("{", "%", "#")):
            return False
        i += 1
    return True


def page_problem(text: str) -> str | None:
    """Why `text` is not a page `render` could have written, or None.

    `snakemake --report` renders its first page with Jinja2 (not sandboxed: `{{ ... }}`
    runs Python) and docutils (`.. include::` copies a local file into the report). A
    page this workflow wrote holds only escaped values; a page read from elsewhere (a
    bucket that pods write to, a results/ folder) is used only if it has that form too.
    """
    lines = text.split("\n")
    if lines[: len(_HEADER)] != _HEADER:
        return "it does not start as the landing page does"
    i = len(_HEADER)
    while i < len(lines) and not (lines[i] == "" and i == len(lines) - 1):
        title, underline, blank, rule = (lines[i : i + 4] + ["", "", "", ""])[:4]
        found = _RULE.fullmatch(rule)
        if not (_is_escaped(title) and underline == "-" * _columns(title) and title and blank == "" and found):
            return f"line {i + 1} is not a section's title and table"
        width, j = len(found.group(1)), i + 4
        while j < len(lines) and lines[j] != rule:
            cut = _split_at_column(lines[j], width)
            key, rest = cut if cut else ("", "")
            key, gap, value = key.rstrip(), rest[:1], rest[1:]
            if not (key and _is_escaped(key) and gap in ("", " ") and _is_escaped(value)):
                return f"line {j + 1} is not a row of escaped values"
            j += 1
        if j + 1 >= len(lines) or lines[j + 1] != "":
            return f"the table of line {i + 1} does not end as the landing page's do"
        i = j + 2
    return None


def first_page(
    page: str,
    placeholder: str,
    warn: Callable[[str], None],
    *,
    storage_prefix: str | None = None,
    fetch: bool = False,
    s3_settings: dict | None = None,
    cache: str = ".snakemake/shardflow/landing.rst",
) -> str:
    """The report's first page: `page` (the landing page the workflow writes), if it is
    there and in the form landing writes it (page_problem: the report renders it with
    Jinja2 and docutils, where other markup could run code or copy in a local file),
    else `placeholder`, with a warning naming why.

    With S3 as default storage (`storage_prefix`) the run's page is in the bucket, and a
    local one belongs to another run: with `fetch` (a report is being made) it is copied
    to `cache`, in one try with short timeouts.
    """
    if storage_prefix:
        from shardflow.core import s3

        # Where the storage plugin stored it: a prefix's `//` read as the plugin reads keys.
        url, page = f"{s3.stored_prefix(storage_prefix)}/{page}", None
        if fetch:
            try:
                client = s3.client(s3_settings, attempts=1, connect_timeout=5, read_timeout=10)
                page = cache if s3.fetch(url, cache, client) else None
            except Exception as exc:  # noqa: BLE001 - the report is still made, with the placeholder
                warn(f"the report's first page is a placeholder: {url} not fetched ({exc})")
    if page is None or not os.path.exists(page):
        return placeholder
    with open(page, encoding="utf-8", errors="replace") as fh:
        problem = page_problem(fh.read())
    if problem:
        warn(f"the report's first page is a placeholder: {page} is not a page rule landing wrote ({problem})")
        return placeholder
    return os.path.abspath(page)


def write_landing(path: str | os.PathLike, sections: list[Section]) -> None:
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(render(sections))


def _shards_line(meta: dict) -> str:
    """How many shards, of what size: a document (or group) longer than the target gets a
    shard of its own, so the target is not a bound."""
    target, sizes = meta["tokens_per_shard"], [s["tokens"] for s in meta["shards"]]
    text = f"{len(sizes):,} of up to {target:,} {meta['dtype']} tokens"
    over = [n for n in sizes if n > target]
    if over:
        text += f" ({len(over):,} hold one longer document or group alone, the largest {max(over):,} tokens)"
    return text


def _duplicates(dedup: dict) -> str:
    """What the gather did with duplicate documents (shards metadata.json's `dedup`).
    Under shards.dedup: false none is looked for, so its count of 0 says nothing of the
    corpus: "0 duplicates dropped" read as checked and clean."""
    if not (dedup.get("within_chunks", True) or dedup.get("across_chunks", True)):
        return "duplicates not looked for (shards.dedup: false: a copy of a document may be in both splits)"
    n = dedup.get("duplicates_within_chunks", 0) + dedup.get("duplicates_across_chunks", 0)
    return f"{n:,} duplicates dropped"


def _val_loss_line(m: dict) -> str:
    """The best and the last weights' validation loss; a diverged run's are null (strict
    JSON: metrics.json holds no NaN or Infinity)."""
    if m["best_val_loss"] is None:
        return "none: no validation loss was finite (training diverged; see losses.parquet)"
    last = "not finite (training diverged)" if m["final_val_loss"] is None else f"{m['final_val_loss']:.4f}"
    return f"{m['best_val_loss']:.4f} at step {m['best_step']:,} (last weights {last} on the whole val split)"


def training_section(dataset: str, files: dict, report: ReportParams | None = None) -> Section:
    """files: shards (the shard folder), jobs (tokenize jobs), metrics and benchmark (train; the
    benchmark read on CUDA only); report: the GPU-hour price."""
    meta, m = read_json(Path(files["shards"]) / "metadata.json"), read_json(files["metrics"])
    jobs = read_job_table(files["jobs"])
    t, tok = meta["totals"], meta["tokenizer"]
    if t["documents"] is None:  # a position split: one text, no documents
        docs = f"one text, split by position ({meta['split']['val_fraction']:g} of its tokens val)"
    else:
        docs = (f"{t['documents']:,} ({t['train']['documents']:,} train / {t['val']['documents']:,} val, "
                f"by {meta['split'].get('key', 'id')} hash); {_duplicates(meta['dedup'] or {})}")
    tokenize = f"; {len(jobs):,} tokenize jobs" if jobs else ""
    rows = [
        ("documents in", docs),
        ("tokens in", f"{t['tokens']:,} ({t['train']['tokens']:,} train / {t['val']['tokens']:,} val)"),
        ("shards", _shards_line(meta) + tokenize),
        ("tokenizer", f"{tok['kind']}, vocabulary {tok['vocab_size']:,}, end-of-text id {tok['eot_id']}"),
        ("steps", f"{m['steps']:,} steps of {m['tokens_per_step']:,} tokens, {m['n_params']:,} parameters"
         + (f" (resumed from step {m['resumed_from_step']:,})" if m["resumed_from_step"] else "")),
        *_batch_rows(m),
        ("best val loss", _val_loss_line(m)),
        ("wall time", f"{_duration(m['train_seconds_total'])} of training, {_duration(m['wall_seconds'])} this run"),
    ]
    speed = f"{m['tokens_per_second']:,.0f} tokens/s" if m["tokens_per_second"] else "not measured"
    speed += f" on {m['device']} x{m['world_size']} ({m['dtype']})"
    if m.get("mfu") is not None:
        speed += f", MFU {100 * m['mfu']:.1f}%"
    rows.append(("throughput", speed))
    if m["device"].startswith("cuda"):
        # As make status and a training sweep's cost.json count them: the job's benchmark
        # seconds (start-up and export too) and the training of its attempts before,
        # x world_size (one GPU a rank).
        seconds = float(read_benchmark(files["benchmark"]).get("s", m["wall_seconds"]))
        gpu_hours = finished_job_gpu_hours(m, seconds)
        cost = ""
        if report is not None:
            cost = f", {money(priced(gpu_hours, report.gpu_hour_price)['estimated_cost'])} {report.currency}"
        rows.append(("GPU-hours and cost", f"{gpu_hours:.4f} GPU-h{cost}"))
    rows.append(("peak GPU memory", _training_peak_memory(m)))
    return Section(f"Training: {dataset}", rows)


def _batch_rows(m: dict) -> list[tuple[str, str]]:
    """A row where the run trained with another micro-batch than its config's (after
    running out of memory: shardflow.train.trainer); none where it did not, or where its
    metrics.json predates the record."""
    if m.get("micro_batch") is None or m["micro_batch"] == m.get("config_micro_batch"):
        return []
    return [("micro-batch", batch_note(m["micro_batch"], m["grad_accum"], m["config_micro_batch"]))]


def _training_peak_memory(m: dict) -> str:
    """The training run's peak GPU memory (metrics.json: trainer.peak_memory_over_ranks),
    under torchrun the largest rank's, with every rank's."""
    if not m["device"].startswith("cuda"):
        return "not on a GPU"
    if m.get("peak_gpu_mem_mib") is None:
        return "not recorded (the run finished before shardflow recorded it)"
    text = _peaks(m["peak_gpu_mem_mib"], m.get("peak_gpu_mem_reserved_mib"))
    by_rank = m.get("peak_gpu_mem_mib_by_rank") or []
    if len(by_rank) > 1:
        text += (f" on the busiest GPU: the largest of the {len(by_rank):,} ranks' peaks (allocated by rank: "
                 + ", ".join(f"{v:,.0f}" for v in by_rank) + " MiB)")
    return text
