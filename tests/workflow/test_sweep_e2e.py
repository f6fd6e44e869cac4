"""Sweeps end to end: a 2 x 2 grid of tiny training runs with 2 seeds (8 jobs) on a few
KB of text, collected into the runs and summary tables, plots, Markdown and LaTeX and
best.json; a changed metric or `best` reruns only the collection; one grid value more
runs only its 4 jobs and the collection; a key no job reads reruns nothing; a bad sweep
(a misspelt metric included) stops the dry run with a line naming the problem; and
retrieval sweeps embed once per distinct embedding settings (a dry run's DAG)."""

import json
import re

import pandas as pd
import pytest
import yaml

from shardflow.corpus.demo import DemoParams, build_demo_corpus
from tests.helpers import assert_no_secrets, job_counts, params_changed, snakemake, write_config

pytestmark = pytest.mark.workflow

DS = "sw"
COLLECT = "collect_sweep_lr_layers"
TABLES = "results/sweeps/lr-layers"
TARGET = f"{TABLES}/summary.parquet"
LRS = [1.0e-3, 3.0e-3]
LAYERS = [1, 2]
# Seconds per job on 2 cores: most of it is the interpreter and torch starting.
TRAIN = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "batch_size": 4, "max_iters": 10,
         "eval_interval": 10, "eval_windows": 8, "checkpoint_interval": 10, "warmup_iters": 2,
         "lr_decay_iters": 10, "sample_tokens": 8, "dtype": "float32"}


def _config(path, text, grid, sweeps_extra=None, **top):
    cfg = {
        "dataset": DS, "tasks": ["training"], "n_chunks": 1,
        "input": {"path": str(text), "format": "text", "text_mode": "files"},
        "shards": {"tokenizer": "char", "split": "position", "val_fraction": 0.2},
        "train": TRAIN, "gpu_jobs": {"device": "cpu"},
        "sweeps": {"lr-layers": {"stage": "train", "grid": grid, "seeds": [0, 1],
                                 "metrics": {"best_val_loss": "min", "final_train_loss": "min"}},
                   **(sweeps_extra or {})},
        **top,
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """About 6 KB of English (stdlib docstrings) as one text file."""
    folder = tmp_path_factory.mktemp("sweep-text")
    build_demo_corpus(str(folder / "c.jsonl"), DemoParams(max_docs=20, min_words=20))
    docs = [json.loads(line)["text"] for line in (folder / "c.jsonl").read_text().splitlines()]
    path = folder / "input.txt"
    path.write_text("\n\n".join(docs)[:6000])
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, text):
    work = tmp_path_factory.mktemp("sweep-run")
    cfg = _config(work / "c.yaml", text, {"train.lr": LRS, "train.n_layer": LAYERS})
    snakemake(work, TARGET, "--cores", "2", "--configfile", str(cfg))
    return work


def test_runs_and_summary_tables(run):
    runs = pd.read_parquet(run / f"{TABLES}/runs.parquet")
    assert len(runs) == 8 and sorted(set(runs["seed"])) == [0, 1]
    assert sorted(set(runs["train.lr"])) == LRS and sorted(set(runs["train.n_layer"])) == LAYERS
    assert runs["best_val_loss"].notna().all() and (runs["wall_time_s"] > 0).all()
    summary = pd.read_parquet(run / f"{TABLES}/summary.parquet")
    assert len(summary) == 4 and (summary["n_seeds"] == 2).all()
    assert summary["best_val_loss_mean"].notna().all() and summary["best_val_loss_std"].notna().all()
    assert summary["best"].sum() == 1
    assert len(pd.read_csv(run / f"{TABLES}/runs.csv")) == 8
    # The two seeds are different runs: their losses differ.
    assert (summary["best_val_loss_std"] > 0).any()
    # Eight train jobs of the sweep's own, each counted once (the main run's shards they
    # read are charged to no run).
    cost = json.loads((run / f"{TABLES}/cost.json").read_text())
    assert cost["jobs"] == cost["by_origin"]["sweep"]["jobs"] == 8 and cost["by_origin"]["main_run"]["jobs"] == 0
    assert cost["wall_time_s"] == pytest.approx(runs["wall_time_s"].sum(), abs=0.01) and cost["gpu_hours"] == 0.0


def test_best_point_plots_and_exports(run):
    summary = pd.read_parquet(run / f"{TABLES}/summary.parquet")
    top = summary.loc[summary["best_val_loss_mean"].idxmin()]
    best = json.loads((run / f"{TABLES}/best.json").read_text())
    assert best["point"] == top["point"] and best["goal"] == "min" and best["n_seeds"] == 2
    assert best["mean"] == pytest.approx(top["best_val_loss_mean"])
    assert best["params"] == {"train.lr": top["train.lr"], "train.n_layer": top["train.n_layer"]}
    bold = f"{top['best_val_loss_mean']:.3f}"
    md = (run / f"{TABLES}/table.md").read_text()
    tex = (run / f"{TABLES}/table.tex").read_text()
    assert f"**{bold}" in md and f"\\mathbf{{{bold}" in tex and "\\toprule" in tex
    plots = run / f"{TABLES}/plots"
    for name in ("best_val_loss_vs_lr.png", "best_val_loss_vs_n_layer.png", "best_val_loss_lr_x_n_layer.png",
                 "final_train_loss_lr_x_n_layer.png"):
        assert (plots / name).read_bytes()[:4] == b"\x89PNG", name
    points = json.loads((run / f"{TABLES}/points.json").read_text())
    assert len(points["points"]) == 4 and points["seeds"] == [0, 1]
    # Each job's own outputs sit under its point and seed, with the point's values.
    job = run / "results/sweeps/lr-layers/lr=0.003__n_layer=2/seed=1/train"
    assert json.loads((job / "config.json").read_text())["model"]["n_layer"] == 2


def test_training_metric_names_are_the_ones_checked_at_parse_time(run):
    """shardflow.sweep.metrics.TRAIN is written out from the trainer's record: pinned here."""
    from shardflow.sweep.metrics import TRAIN

    def leaves(record, prefix=""):
        for key, value in record.items():
            if not prefix and key == "made_with":  # what the job ran with: no metric (table.flatten_metrics)
                continue
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                yield f"{prefix}{key}"

    record = json.loads((run / "results/sweeps/lr-layers/lr=0.001__n_layer=1/seed=0/train/metrics.json").read_text())
    assert set(leaves(record)) == set(TRAIN)


def test_a_changed_metric_or_best_reruns_only_the_collection(run, text):
    """Before test_a_new_grid_value_runs_only_its_jobs, which moves the run on."""
    cfg = _config(run / "metrics.yaml", text, {"train.lr": LRS, "train.n_layer": LAYERS})
    sweep = yaml.safe_load(cfg.read_text())
    sweep["sweeps"]["lr-layers"].update(metrics={"final_train_loss": "min", "best_val_loss": "min",
                                                 "tokens_per_second": "max"}, best="best_val_loss")
    cfg.write_text(yaml.safe_dump(sweep, sort_keys=False))
    dry = snakemake(run, TARGET, "-n", "--configfile", str(cfg))
    assert job_counts(dry.stdout) == {"sweep_spec": 1, COLLECT: 1, "total": 2}


def test_a_new_grid_value_runs_only_its_jobs(run, text):
    cfg = _config(run / "more.yaml", text, {"train.lr": LRS, "train.n_layer": LAYERS + [3]})
    dry = snakemake(run, TARGET, "-n", "--configfile", str(cfg))
    assert job_counts(dry.stdout) == {"sweep_train": 4, "sweep_spec": 1, COLLECT: 1, "total": 6}
    snakemake(run, TARGET, "--cores", "2", "--configfile", str(cfg))
    runs = pd.read_parquet(run / f"{TABLES}/runs.parquet")
    assert len(runs) == 12 and (runs["train.n_layer"] == 3).sum() == 4
    assert len(pd.read_parquet(run / f"{TABLES}/summary.parquet")) == 6

    # A key outside the train section (what no sweep job reads) reruns nothing.
    cfg = _config(run / "other.yaml", text, {"train.lr": LRS, "train.n_layer": LAYERS + [3]},
                  report={"gpu_hour_price": 9.0})
    dry = snakemake(run, TARGET, "-n", "--configfile", str(cfg))
    assert "Nothing to be done" in dry.stdout + dry.stderr


# A bad sweep stops the dry run at parse time, naming it: one problem found where the
# sweeps are read (shardflow.sweep.spec; every such message is unit-tested in
# tests/unit/sweep/test_spec.py), and the two found only against the workflow's plan.
BAD = {
    "unknown key": ({"grid": {"train.lrr": [0.1]}}, "unknown parameter 'train.lrr'"),
    "misspelt metric": ({"grid": {"train.lr": [0.1]}, "metrics": {"best_val_los": "min"}},
                        "sweep 'bad': metric 'best_val_los' is not one a train job writes; did you mean 'best_val_loss'?"),
    "stage without its data": ({"stage": "retrieval", "grid": {"embedding.max_length": [64]},
                                "metrics": {"ndcg_at_10": "max"}},
                               "sweep 'bad' (stage retrieval) needs retrieval.path"),
}


@pytest.mark.dryrun
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_sweep_is_a_parse_time_error_naming_it(tmp_path, case):
    settings, message = BAD[case]
    bad = {"bad": {"stage": "train", "seeds": [0], "metrics": {"best_val_loss": "min"}} | settings}
    (tmp_path / "input.txt").write_text("To be, or not to be: that is the question.\n" * 20)
    cfg = _config(tmp_path / "c.yaml", tmp_path / "input.txt", {"train.lr": [1.0e-3]}, sweeps_extra=bad)
    proc = snakemake(tmp_path, TARGET, "-n", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in out, out[-3000:]
    assert "sweep 'bad'" in out


def _tiny_beir(folder):
    """A four-document BEIR folder with one query."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(4)))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "doc 0"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    return folder


@pytest.mark.dryrun
def test_retrieval_sweeps_embed_once_per_distinct_embedding_settings(tmp_path):
    """Points that vary only the search read the main run's embeddings; an embedding key
    gets one set per value and seed (embedding.seed), shared across sweeps; the query
    prompt changes only the query set. Every job is in the DAG before any data exists."""
    import re

    beir = _tiny_beir(tmp_path / "beir")
    metrics = {"ndcg_at_10": "max"}
    sweeps = {
        "search": {"stage": "retrieval", "grid": {"retrieval.top_k": [100, 200], "retrieval.drop_identical_ids": [True, False]},
                   "seeds": [0], "metrics": metrics},
        "maxlen": {"stage": "retrieval", "grid": {"embedding.max_length": [64, 128]}, "seeds": [0, 1], "metrics": metrics},
        "prompt": {"stage": "retrieval", "points": [{"embedding.max_length": 64, "retrieval.query_prompt": "q: "}],
                   "seeds": [0], "metrics": metrics},
    }
    cfg = write_config(tmp_path / "c.yaml", retrieval={"path": str(beir), "name": "tiny", "n_chunks": 2}, sweeps=sweeps)
    targets = [f"results/sweeps/{name}/summary.parquet" for name in sweeps]
    dag = snakemake(tmp_path, *targets, "--configfile", str(cfg), "--dag").stdout
    nodes = dict(re.findall(r'^\s*(\d+)\[label = "([^"]+)"', dag, re.MULTILINE))
    rule = {n: label.split("\\n")[0] for n, label in nodes.items()}
    counts = {r: list(rule.values()).count(r) for r in set(rule.values())}
    assert {r: n for r, n in counts.items() if "embed" in r or r in ("merge", "verify", "sweep_merge", "sweep_verify")} == {
        "embed": 2, "embed_queries": 1, "merge": 1, "verify": 1,  # the main run's, read by search
        "sweep_embed": 2 * 4, "sweep_merge": 4, "sweep_verify": 4,  # max_length 64, 128 x seeds 0, 1
        "sweep_embed_queries": 4 + 1,  # and the prompt point's queries (its corpus is maxlen's)
    }
    assert counts["sweep_retrieval_evaluate"] == 4 + 4 + 1
    edges = re.findall(r"^\s*(\d+) -> (\d+)", dag, re.MULTILINE)
    search = {b for _, b in edges if "sweep: search" in nodes[b]}
    assert len(search) == 4
    assert {rule[a] for a, b in edges if b in search} == {"merge", "verify", "embed_queries", "retrieval_qrels"}


def _every_stage(tmp_path, embed_metrics):
    """A config with a sweep of each stage (tr, re, su, em) over two points, one seed."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"a{i}", "text": f"Doc {i} starts. It ends.", "summary": "Doc."}) + "\n"
                            for i in range(6)))
    sweeps = {
        "tr": {"stage": "train", "grid": {"train.lr": [1.0e-3, 2.0e-3]}, "seeds": [0],
               "metrics": {"best_val_loss": "min"}},
        "re": {"stage": "retrieval", "grid": {"retrieval.top_k": [100, 200]}, "seeds": [0],
               "metrics": {"ndcg_at_10": "max"}},
        "su": {"stage": "summarise", "grid": {"summarise.k": [1, 2]}, "seeds": [0], "metrics": {"rouge1": "max"}},
        "em": {"stage": "embed", "grid": {"embedding.token_budget": [512, 1024]}, "seeds": [0],
               "metrics": embed_metrics},
        # random search: its 3 points drawn at parse time, so the dry run lists their jobs
        "rs": {"stage": "train", "grid": {"train.lr": {"log_uniform": [1.0e-4, 1.0e-2]},
                                          "train.n_layer": {"int_uniform": [1, 3]}},
               "sample": {"points": 3, "seed": 0}, "seeds": [0], "metrics": {"best_val_loss": "min"}},
    }
    return write_config(
        tmp_path / "c.yaml", input={"path": str(docs)}, n_chunks=2, tasks=["embedding", "training"],
        shards={"tokenizer": "char"}, summarise={"method": "lead", "reference_field": "summary"},
        retrieval={"path": str(_tiny_beir(tmp_path / "beir")), "name": "tiny", "n_chunks": 2}, sweeps=sweeps,
    )


@pytest.mark.dryrun
def test_sweeps_of_every_stage_in_one_config(tmp_path):
    """Each stage's jobs write metrics.json under their sweep's folder: with sweeps of
    several stages configured, each file has one rule that makes it (before, the DAG
    stopped as ambiguous: sweep_retrieval_evaluate and sweep_evaluate_summaries)."""
    cfg = _every_stage(tmp_path, {"items_per_s": "max", "agreement.cosine_min": "max"})
    sweeps = ("tr", "re", "su", "em", "rs")
    out = snakemake(tmp_path, "--configfile", str(cfg), "-n").stdout
    counts = job_counts(out)
    stages = ("sweep_retrieval_evaluate", "sweep_evaluate_summaries", "sweep_embed_metrics")
    assert {r: counts.get(r) for r in stages} == dict.fromkeys(stages, 2)
    assert counts["sweep_train"] == 2 + 3  # tr's grid, rs's sample
    assert len(set(re.findall(r"results/sweeps/rs/(lr=[^/]+__n_layer=\d)/seed=0/train/metrics\.json", out))) == 3
    assert counts["sweep_embed_chunk"] == 2 * 2  # points x chunks
    assert all(counts[f"collect_sweep_{name}"] == 1 for name in sweeps)


@pytest.mark.dryrun
def test_a_changed_price_reruns_the_embed_sweeps_collection_and_no_sweep_job(tmp_path):
    """report.gpu_hour_price is accounting: an embed job records its GPU-hours, and its
    sweep's collection prices them (before, each sweep_embed_metrics job reran for a new
    price, reading the point's and the main run's vectors again). `--touch` records every
    job's params without running one (no output needs to exist); a dry run with another
    price then lists the rules whose recorded params it changed: the embed sweep's
    collection (a ranked cost metric included), no sweep job, no other collection. So
    does another report.currency, which the embed sweep's tables name and no other
    sweep's show."""
    cfg = _every_stage(tmp_path, {"items_per_s": "max", "estimated_cost_per_million_records": "min"})
    snakemake(tmp_path, "--touch", "--cores", "1", "--configfile", str(cfg))
    for report in ("report={gpu_hour_price: 9.0}", "report={currency: EUR}"):
        dry = snakemake(tmp_path, "-n", "--configfile", str(cfg), "--config", report).stdout
        changed = params_changed(dry)
        assert "collect_sweep_em" in changed, dry[-3000:]
        assert not {r for r in changed if r.startswith("sweep_") or r.startswith("collect_sweep_")} - {"collect_sweep_em"}


def test_no_fake_credential_in_any_file_of_the_run(run):
    """The sweep's runs saw fake credentials (offline_env): no file they wrote holds one."""
    files = assert_no_secrets(run)
    assert any(f.name == "best.json" for f in files) and any(f.suffix == ".log" for f in files)


def test_make_sweep_without_its_data_names_the_variable_to_set(tmp_path):
    """A shipped sweep whose data is missing (a clone without ../shared) stops before any
    job with the variable that gives it, not a traceback from the parse."""
    import subprocess

    from tests.helpers import REPO, offline_env

    missing = tmp_path / "dev.jsonl"
    proc = subprocess.run(
        ["make", "--no-print-directory", "sweep", "NAME=cnndm-lead-k", f"CNNDM={missing}"],
        cwd=REPO, env=offline_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode != 0
    assert f"no data at {missing}; give it: make sweep NAME=cnndm-lead-k CNNDM=<path>" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_sweep_adopt_after_a_grid_key_is_added_runs_only_the_new_points(run, text, tmp_path, monkeypatch, capsys):
    """The module's finished lr x n_layer sweep (a copy) gains `train.n_head: [2, 4]`, 2
    its base: every point is renamed (lr=0.001__n_layer=1 -> ...__n_head=2__n_layer=1), so
    a dry run plans all 16 jobs; after `sweep-adopt` it plans only the 8 jobs of n_head 4
    and the collection. The moved jobs keep Snakemake's records: a changed base value
    they read (train.warmup_iters) reruns them too, as it would have before the move.
    (The chain of a job's outputs read by the next, whose recorded inputs follow the
    move: tests/unit/sweep/test_adopt.py, with Snakemake's own records.)"""
    import shutil

    from shardflow.cli import main

    work = tmp_path / "work"
    shutil.copytree(run, work, symlinks=True)  # times kept: the copy is up to date as the run is
    old = [f"lr={lr}__n_layer={n}" for lr in ("0.001", "0.003") for n in LAYERS]
    grid = {"train.lr": LRS, "train.n_layer": LAYERS, "train.n_head": [2, 4]}
    grown = _config(work / "grown.yaml", text, grid)
    proc = snakemake(work, TARGET, "-n", "--configfile", str(grown))
    assert job_counts(proc.stdout)["sweep_train"] == 16
    assert (  # the parse points at the command
        "sweep 'lr-layers': results/sweeps/lr-layers/ holds 4 point folders named by other keys than its grid's"
    ) in proc.stdout + proc.stderr, proc.stderr[-3000:]

    monkeypatch.chdir(work)  # make sweep-adopt's command, in this process
    capsys.readouterr()
    assert main(["sweep-adopt", "lr-layers", "--configfile", str(grown)]) == 0, capsys.readouterr().err
    moved = [line for line in capsys.readouterr().out.splitlines() if ": moved results, logs, benchmarks" in line]
    assert len(moved) == 8, moved  # 4 points x 2 seeds
    for pid in old:
        assert (work / TABLES / pid.replace("__n_layer", "__n_head=2__n_layer") / "seed=1/train/metrics.json").is_file()
    proc = snakemake(work, TARGET, "-n", "--configfile", str(grown))
    counts = job_counts(proc.stdout)
    assert counts["sweep_train"] == 8 and counts[COLLECT] == 1, proc.stdout[-3000:]
    assert "sweep-adopt" not in proc.stdout + proc.stderr
    assert "n_head=2" not in "\n".join(line for line in proc.stdout.splitlines() if "wildcards:" in line)

    changed = _config(work / "warmup.yaml", text, grid)
    cfg = yaml.safe_load(changed.read_text())
    cfg["train"]["warmup_iters"] = 3
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert job_counts(snakemake(work, TARGET, "-n", "--configfile", str(changed)).stdout)["sweep_train"] == 16
