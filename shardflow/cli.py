"""Small command-line helpers behind Makefile targets (`python -m shardflow.cli ...`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys

import yaml

from shardflow.core.atomic import atomic_open


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _chunks(text: str) -> str | int:
    """CHUNKS=: empty (left to the caller), `auto`, or a positive integer (as an int)."""
    if text in ("", "auto"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}")


def _split(text: str) -> str:
    """SPLIT=: a qrels file name without its .tsv (BEIR: test, dev, train)."""
    if not text or "/" in text or text.endswith(".tsv"):
        raise argparse.ArgumentTypeError(f"expected a split name such as test or dev, got {text!r}")
    return text


def beir_config(args: argparse.Namespace) -> int:
    """Write a config overlay that evaluates one BEIR folder."""
    folder = os.path.abspath(args.data)
    if not os.path.isdir(folder):
        print(f"evaluate-beir: DATA={args.data!r} is not a folder", file=sys.stderr)
        return 2
    qrels = os.path.join(folder, "qrels")
    if os.path.isdir(qrels) and not os.path.isfile(os.path.join(qrels, f"{args.split}.tsv")):
        found = sorted(n.removesuffix(".tsv") for n in os.listdir(qrels) if n.endswith(".tsv"))
        print(
            f"evaluate-beir: {qrels}/{args.split}.tsv does not exist (SPLIT={args.split}); "
            f"this folder's splits: {', '.join(found) or 'none'}",
            file=sys.stderr,
        )
        return 2
    overlay = {
        "retrieval": {
            "path": folder,
            "format": "beir",
            "name": args.name,
            "split": args.split,
            "drop_identical_ids": args.drop_identical_ids,
        },
        "embedding": {"model": args.model},
    }
    if args.chunks != "":  # empty: the config's retrieval.n_chunks
        overlay["retrieval"]["n_chunks"] = args.chunks
    with atomic_open(args.out, "w", encoding="utf-8") as fh:
        yaml.safe_dump(overlay, fh, sort_keys=False)
    print(f"evaluate-beir: config overlay {args.out}", file=sys.stderr)
    return 0


def summaries_config(args: argparse.Namespace) -> int:
    """Write a config overlay that summarises (or scores stored summaries of) one JSONL file."""
    path = os.path.abspath(args.data)
    if not os.path.isfile(path):
        print(f"evaluate-summaries: DATA={args.data!r} is not a file", file=sys.stderr)
        return 2
    if args.method == "stored" and not args.stored:
        print("evaluate-summaries: METHOD=stored needs STORED=<field> (e.g. system_summaries.*)", file=sys.stderr)
        return 2
    model = "" if args.model in ("", "default") else args.model  # `make`'s MODEL defaults to "default"
    if args.method == "abstractive" and not model:
        print("evaluate-summaries: METHOD=abstractive needs MODEL=<model folder, or hub name in the local cache>", file=sys.stderr)
        return 2
    # A variable the method does not read is an error: the run would otherwise score
    # something other than what was asked for and print its metrics path all the same.
    if args.stored and args.method != "stored":
        print(
            f"evaluate-summaries: STORED={args.stored!r} is read by METHOD=stored only, and METHOD={args.method} "
            "makes summaries of its own: add METHOD=stored, or leave STORED out",
            file=sys.stderr,
        )
        return 2
    if args.stored_format and args.method != "stored":
        print(
            f"evaluate-summaries: STORED_FORMAT={args.stored_format!r} is read by METHOD=stored only, and "
            f"METHOD={args.method} makes summaries of its own: add METHOD=stored, or leave STORED_FORMAT out",
            file=sys.stderr,
        )
        return 2
    if model and args.method in ("lead", "stored"):
        print(
            f"evaluate-summaries: MODEL={model!r} is read by METHOD=abstractive (its model) and METHOD=extractive "
            f"(its sentence encoder); METHOD={args.method} loads no model: leave MODEL out",
            file=sys.stderr,
        )
        return 2
    summarise = {
        "method": args.method,
        "reference_field": args.reference,
        "reference_format": args.reference_format,
        "splitter": args.splitter,
    }
    if model:
        # summarise.encoder for extractive, as summarise.model is abstractive's alone; a
        # name that is no path is a hub name, looked up in the local cache (both keys').
        key = "encoder" if args.method == "extractive" else "model"
        summarise[key] = os.path.abspath(model) if os.path.exists(model) else model
    if args.stored:
        summarise["stored_field"] = args.stored
    if args.stored_format:
        summarise["stored_format"] = args.stored_format
    overlay = {
        "dataset": args.name,
        "tasks": ["summarisation"],
        "n_chunks": args.chunks or "auto",
        "input": {"path": path, "format": "jsonl", "id_field": args.id, "text_field": args.article},
        "summarise": summarise,
    }
    with atomic_open(args.out, "w", encoding="utf-8") as fh:
        yaml.safe_dump(overlay, fh, sort_keys=False)
    print(f"evaluate-summaries: config overlay {args.out}", file=sys.stderr)
    return 0


def print_warnings(args: argparse.Namespace) -> int:
    """Print a metrics file's `warnings` to stderr (make evaluate-summaries: the run's
    job logs are not shown when the jobs succeed)."""
    with open(args.metrics, encoding="utf-8") as fh:
        for warning in json.load(fh).get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def sweep_table(args: argparse.Namespace) -> int:
    """Print the summary table a sweep config file's sweep writes (make sweep's target)."""
    try:
        with open(args.config, encoding="utf-8") as fh:
            sweeps = (yaml.safe_load(fh) or {}).get("sweeps") or {}
    except OSError as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    names = [args.name] if args.name else list(sweeps)
    if len(names) != 1 or names[0] not in sweeps:
        found = ", ".join(sweeps) or "none"
        print(f"sweep: {args.config} must hold one sweep (or pass --name); it has: {found}", file=sys.stderr)
        return 2
    sweep = sweeps[names[0]] or {}
    folder = sweep.get("folder", names[0]) if isinstance(sweep, dict) else names[0]
    print(f"results/sweeps/{folder}/summary.parquet")
    return 0


def _positive(text: str) -> int:
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value > 0 and math.isfinite(value):
        return value
    raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")


def _s3_prefix(text: str) -> str:
    from shardflow.core.s3 import S3Url

    try:
        S3Url.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected s3://<bucket>/<prefix> ({exc})") from None
    return text


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction of the peak, above 0 and at most 1, got {text!r}")
    return value


def _gpus(args: argparse.Namespace, cfg: dict) -> tuple[int, str, bool]:
    """(GPUs, where that figure came from, whether the GPU rules run on this host's CPU)
    for `make estimate` and `make status`: --gpus, else as the local profile runs them.
    Status uses the first two only: the run it watches may be on other hosts (a SLURM
    login node has no GPU), so it takes the device from the jobs' records instead."""
    from shardflow.core.gpu_slots import concurrent_gpu_jobs
    from shardflow.workflow import estimate as est

    if args.gpus is not None:
        return args.gpus, "--gpus", False
    source = "as the local profile runs them at once: concurrent_gpu_jobs(), the GPUs nvidia-smi or $SHARDFLOW_GPUS list, 1 without; --gpus N for a cluster"
    gpus = concurrent_gpu_jobs()
    if cfg["gpu_jobs"]["pinning"] != "off" and cfg["gpu_jobs"]["devices"] is not None:
        # The profile's pool counts the host's GPUs (it cannot read the workflow config),
        # but a job runs only once it holds a slot of gpu_jobs.devices (core.gpu_slots):
        # the others wait.
        gpus = min(gpus, max(1, len(est.host_gpus(cfg))))
        source = "as the local profile runs them at once: one per GPU of gpu_jobs.devices; --gpus N for a cluster"
    # As the local executor does (rules/common.smk runs_on_cpu): under `auto`, a host
    # without GPUs runs the GPU rules on the CPU.
    return gpus, source, cfg["gpu_jobs"]["device"] == "auto" and not est.host_gpus(cfg)


def _print(name: str, args: argparse.Namespace, compute, as_json, table) -> int:
    """Run `compute(cfg)` on the config of `args` and print its result: `table(result)`,
    or `as_json(result)` with --json; a config, input or model error (its message names
    the key or file) is one line on stderr and exit status 2."""
    from shardflow.workflow import estimate as est

    try:
        result = compute(est.load_config(args.configfile))
    except (ValueError, OSError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(as_json(result), sys.stdout, indent=2)
        print()
    else:
        print(table(result))
    return 0


def estimate(args: argparse.Namespace) -> int:
    """Print what the configured run would take: GPU-hours, cost, wall time, disk (make estimate)."""
    from shardflow.workflow import estimate as est

    def compute(cfg: dict):
        gpus, source, local_cpu = _gpus(args, cfg)
        gpu = est.GpuAssumption(args.gpu_peak_tflops, args.mfu)
        return est.estimate(cfg, gpus, source, args.records, local_cpu=local_cpu, gpu=gpu)

    return _print("estimate", args, compute, est.as_json, est.table)


def status(args: argparse.Namespace) -> int:
    """Print where the configured run stands: jobs, records, rate, time left, GPU-hours and
    cost so far, failed jobs with their error (make status)."""
    from shardflow.workflow import status as st

    def compute(cfg: dict):
        gpus, source, _ = _gpus(args, cfg)
        if not args.storage_prefix:
            return st.status(cfg, gpus, source)
        from shardflow.workflow import mirror

        with mirror.working_copy(args.storage_prefix) as copied:
            return st.status(cfg, gpus, source, storage=copied)

    return _print("status", args, compute, st.as_json, st.table)


def compare(args: argparse.Namespace) -> int:
    """Print why two runs differ, from their provenance records: the outputs, then what
    could have changed them (make compare). Exit status 0 where the outputs are
    identical, 1 where they differ, 2 for a record that cannot be read (naming the file)."""
    from shardflow.workflow import compare as cmp
    from shardflow.workflow.reproduce import ReproductionError

    try:
        records = [cmp.read_record(path) for path in (args.a, args.b)]
    except (ReproductionError, ValueError, OSError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    diff = cmp.compare(*records)
    if args.json:
        json.dump(cmp.as_json(diff, args.a, args.b), sys.stdout, indent=2, allow_nan=False)
        print()
    else:
        print(cmp.table(diff, args.a, args.b))
    return 0 if diff["outputs_identical"] else 1


def _dataset(args: argparse.Namespace) -> str:
    """--dataset, else the config's `dataset` (make search and make hits: DATASET=, CONFIG=)."""
    if args.dataset:
        return args.dataset
    from shardflow.workflow import estimate as est

    return est.load_config(args.configfile)["dataset"]


def search(args: argparse.Namespace) -> int:
    """Print the documents of a finished run nearest to each query (make search): the
    queries embedded as the run embedded its documents (shardflow.workflow.search)."""
    from shardflow.corpus.readers import ReaderOptions
    from shardflow.workflow import search as nearest

    if args.prompt is not None and args.prompt_name is not None:
        print("search: give --prompt or --prompt-name, not both", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weights' loading bar: noise before a few lines of answers
    try:
        dataset = _dataset(args)
        opts = ReaderOptions(format=args.format, id_field=args.id_field or None, text_field=args.text_field)
        queries = nearest.read_queries(args.query, args.queries, opts)
        answers, used = nearest.search(os.path.join(args.results, dataset), queries, args.top_k, prompt=args.prompt,
                                       prompt_name=args.prompt_name, model=args.model or None, device=args.device)
    except (ValueError, OSError) as exc:
        print(f"search: {exc}", file=sys.stderr)
        return 2
    if args.out or args.json:  # the JSON lines hold no prompt: say it beside them, where the table would
        print(nearest.header(used), file=sys.stderr)
    if args.out:
        with atomic_open(args.out, "w", encoding="utf-8", newline="\n") as fh:
            for answer in answers:
                fh.write(json.dumps(answer.as_json(), ensure_ascii=False) + "\n")
        hits = sum(len(a.hits) for a in answers)
        print(f"search: {len(answers)} queries, {hits} hits written to {args.out} ({used['data_set']}, "
              f"{used['documents']} documents)")
    elif args.json:
        for answer in answers:
            print(json.dumps(answer.as_json(), ensure_ascii=False))
    else:
        print(nearest.table(answers, used), end="")
    return 0


def hits(args: argparse.Namespace) -> int:
    """Print task search's hits of a finished run with their texts, nothing embedded (make
    hits): of the queries --query names, else of the first --first of its queries file."""
    from shardflow.workflow import search as nearest

    query_ids = []
    for given in args.query:  # make hits QUERY=a,b passes one --query
        ids = [q.strip() for q in given.split(",") if q.strip()]
        if not ids:
            print(f"hits: --query {given!r} names no query id", file=sys.stderr)
            return 2
        query_ids += ids
    if query_ids and args.first is not None:
        print("hits: give --query or --first, not both", file=sys.stderr)
        return 2
    try:
        answers, used = nearest.stored_hits(os.path.join(args.results, _dataset(args)), query_ids=query_ids,
                                            first=args.first, top_k=args.top_k)
    except (ValueError, OSError) as exc:
        print(f"hits: {exc}", file=sys.stderr)
        return 2
    if args.json:  # the JSON lines say nothing of the file they came from: said beside them
        print(nearest.header(used), file=sys.stderr)
        for answer in answers:
            print(json.dumps(answer.as_json(), ensure_ascii=False))
    else:
        print(nearest.table(answers, used), end="")
    return 0


def sweep_adopt(args: argparse.Namespace) -> int:
    """Move a sweep's finished jobs whose point was renamed (a key added to or removed
    from its grid) to the current point's id, with Snakemake's records of them (make
    sweep-adopt; shardflow.sweep.adopt)."""
    from shardflow.sweep import adopt
    from shardflow.workflow import estimate as est

    try:
        specs = est.sweeps(est.load_config(args.configfile))
    except (ValueError, OSError) as exc:
        print(f"sweep-adopt: {exc}", file=sys.stderr)
        return 2
    if args.name not in specs:
        shipped = f"config/sweeps/{args.name}.yaml"
        hint = (
            f" ({shipped} defines it: pass --configfile {shipped}, as make sweep-adopt does)"
            if os.path.exists(shipped) and shipped not in (args.configfile or [])
            else ""
        )
        print(
            f"sweep-adopt: the config has no sweep {args.name!r}; it has: {', '.join(specs) or 'none'}{hint}",
            file=sys.stderr,
        )
        return 2
    if adopt.snakemake_running():
        print(
            "sweep-adopt: a Snakemake run holds this working directory (.snakemake/locks/ is not empty): let it end "
            "first (after a run that was killed, `snakemake --unlock` clears the locks)",
            file=sys.stderr,
        )
        return 2
    try:
        lines = adopt.adopt(specs[args.name], dry_run=args.dry_run)
    except (ValueError, OSError) as exc:
        print(f"sweep-adopt: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    if args.dry_run:
        print("sweep-adopt: dry run: nothing was moved")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardflow.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("beir-config", help="config overlay for make evaluate-beir")
    p.add_argument("--data", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--split", default="test", type=_split, help="qrels/<split>.tsv (BEIR: test, dev, train)")
    p.add_argument("--drop-identical-ids", type=_bool, default=True)
    p.add_argument("--chunks", default="", type=_chunks)
    p.add_argument("--out", required=True)
    p.set_defaults(func=beir_config)
    p = sub.add_parser("summaries-config", help="config overlay for make evaluate-summaries")
    p.add_argument("--data", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--method", default="lead", choices=["lead", "extractive", "abstractive", "stored"])
    p.add_argument("--model", default="")
    p.add_argument("--stored", default="")
    p.add_argument("--stored-format", default="", choices=["", "prose", "tokenised"])  # empty: the config's
    p.add_argument("--id", default="id")
    p.add_argument("--article", default="article")
    p.add_argument("--reference", default="highlights")
    p.add_argument("--reference-format", default="prose", choices=["prose", "tokenised"])
    p.add_argument("--splitter", default="punctuation", choices=["punctuation", "prose"])
    p.add_argument("--chunks", default="auto", type=_chunks)  # empty: auto
    p.add_argument("--out", required=True)
    p.set_defaults(func=summaries_config)
    p = sub.add_parser("warnings", help="print the warnings of a metrics JSON (make evaluate-summaries)")
    p.add_argument("metrics")
    p.set_defaults(func=print_warnings)
    p = sub.add_parser("sweep-table", help="the summary table of a sweep config file (make sweep)")
    p.add_argument("config")
    p.add_argument("--name", default="")
    p.set_defaults(func=sweep_table)
    p = sub.add_parser("estimate", help="GPU-hours, cost, wall time and disk of the configured run (make estimate)")
    p.add_argument(
        "--configfile", nargs="+", action="extend", default=[], help="merged over config/config.yaml in order"
    )
    p.add_argument("--gpus", type=_positive, default=None, help="GPUs for the wall time (default: this host's)")
    p.add_argument("--records", type=_positive, default=None, help="the main data set's records (else counted)")
    p.add_argument(
        "--gpu-peak-tflops",
        type=_positive_float,
        default=None,
        help="training without a measured run: the GPU's dense bf16 peak, TFLOP/s (default: named in the output)",
    )
    p.add_argument(
        "--mfu",
        type=_fraction,
        default=None,
        help="training without a measured run: the share of that peak it uses, its MFU (default: named in the output)",
    )
    p.add_argument("--json", action="store_true", help="the estimate as JSON")
    p.set_defaults(func=estimate)
    p = sub.add_parser("status", help="where the configured run stands: jobs, records, time left, cost (make status)")
    p.add_argument(
        "--configfile", nargs="+", action="extend", default=[], help="merged over config/config.yaml in order"
    )
    p.add_argument("--gpus", type=_positive, default=None, help="GPUs for the time left (default: this host's)")
    p.add_argument(
        "--storage-prefix",
        type=_s3_prefix,
        default=None,
        help="a run with S3 as its default storage (the eks profile): its s3://bucket/prefix, read through a local "
        "copy of what status needs (.snakemake/shardflow-status/)",
    )
    p.add_argument("--json", action="store_true", help="the status as JSON")
    p.set_defaults(func=status)
    p = sub.add_parser(
        "compare",
        help="why two runs differ: their provenance records compared, outputs first (make compare); exit status 0 "
        "where the outputs are identical, 1 where they differ, 2 for a bad record",
    )
    p.add_argument("a", help="run A's results/<dataset>/provenance.json")
    p.add_argument("b", help="run B's results/<dataset>/provenance.json")
    p.add_argument("--json", action="store_true", help="the whole comparison as JSON, every file listed")
    p.set_defaults(func=compare)
    p = sub.add_parser(
        "search",
        help="the documents of a finished run nearest to each query, embedded as the run embedded its documents "
        "(make search)",
    )
    p.add_argument("--query", action="append", default=[], help="a query text (repeatable); ids query_1, query_2, ...")
    p.add_argument(
        "--queries", nargs="+", action="extend", default=[], help="query files (path or glob), read as input.path is"
    )
    p.add_argument("--format", default="auto", help="the query files' format: auto, jsonl, parquet, csv, tsv, text")
    p.add_argument("--id-field", default="id", help="the query files' id field (empty: ids are <file>:<line>)")
    p.add_argument("--text-field", default="text", help="the query files' text field")
    p.add_argument("--top-k", type=_positive, default=10, help="hits per query (default 10)")
    p.add_argument("--dataset", default="", help="the data set searched (default: the config's `dataset`)")
    p.add_argument(
        "--configfile", nargs="+", action="extend", default=[], help="merged over config/config.yaml in order"
    )
    p.add_argument("--results", default="results", help="the folder holding results/<dataset> (default: results)")
    p.add_argument("--prompt", default=None, help="a literal prompt for the queries")
    p.add_argument(
        "--prompt-name",
        default=None,
        help="a prompt of the model's config (default: an evaluation's query prompt, the model's `query` prompt, "
        "else the documents')",
    )
    p.add_argument(
        "--model",
        default="",
        help="the run's model where it lies now, if it moved (checked against the hash the run recorded)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA where there is one), cpu, cuda or cuda:N")
    p.add_argument("--json", action="store_true", help="one JSON line per query, its hits with their texts")
    p.add_argument("--out", default="", help="write the JSON lines to this file instead (atomically)")
    p.set_defaults(func=search)
    p = sub.add_parser(
        "hits",
        help="task search's hits of a finished run with their texts, nothing embedded (make hits)",
    )
    p.add_argument(
        "--query", action="append", default=[], help="query ids (repeatable, or several at commas): their hits, in this order"
    )
    p.add_argument("--first", type=_positive, default=None, help="the first N queries of the file (default 5, no --query)")
    p.add_argument("--top-k", type=_positive, default=None, help="hits shown per query (default: all the file holds)")
    p.add_argument("--dataset", default="", help="the data set (default: the config's `dataset`)")
    p.add_argument(
        "--configfile", nargs="+", action="extend", default=[], help="merged over config/config.yaml in order"
    )
    p.add_argument("--results", default="results", help="the folder holding results/<dataset> (default: results)")
    p.add_argument("--json", action="store_true", help="one JSON line per query, its hits with their texts")
    p.set_defaults(func=hits)
    p = sub.add_parser(
        "sweep-adopt",
        help="move a sweep's finished jobs to their point's new id after a key was added to or removed from its grid "
        "(make sweep-adopt)",
    )
    p.add_argument("name", help="the sweep's name (its key under `sweeps:`)")
    p.add_argument(
        "--configfile", nargs="+", action="extend", default=[], help="merged over config/config.yaml in order"
    )
    p.add_argument("--dry-run", action="store_true", help="print what would move and move nothing")
    p.set_defaults(func=sweep_adopt)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # a pipe closed early fails here, inside the try
    except BrokenPipeError:
        # `status --json | head`: the reader has what it wanted. No traceback, and none at
        # exit when Python flushes stdout again (the recipe of Python's signal docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE  # as a tool killed by SIGPIPE reports it
    sys.exit(code)
