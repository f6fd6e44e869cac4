"""The fault matrix: every rule of the workflow, killed with SIGKILL at a seeded random
point, then the workflow rerun until it finishes; the final outputs must be byte-identical
to an uninterrupted run, and after every interrupted run no output may stand that differs
from it (a partial file kept as finished).

    make test-faults                      the larger seeded run (SHARDFLOW_FAULT_SEEDS), and
                                          the extended matrix (SHARDFLOW_FAULT_EXTENDED=1)
    pytest tests/faults                   this module alone, at make test's size

The extended matrix runs the same test body over the rules only two other configs reach:
EXTENDED_RULES (chunking.by: source over a glob of files, a training sweep with its spec
and collection, method stored's scoring, the reproduction check) and SWEEP_RULES (an
embed sweep, a retrieval sweep that embeds a set of its own and an abstractive summarise
sweep: each one's jobs and collection, on tiny random models); `make test` skips both,
and their fixtures never run there.

Sizes: SHARDFLOW_FAULT_SEEDS (comma-separated seeds, default "1"); each seed plans one
fault per rule, a seeded SHARDFLOW_FAULT_CONTROLLER_SHARE of them (default 0.05: one;
`make test-faults`: 0.5) of the `controller` kind, the others `job`: `job` kills the job
and everything it started (Snakemake sees a failed job, retries rules with `retries`, and
the rerun finishes the rest); `controller` kills Snakemake itself with
its jobs (a lost machine): the rerun meets the stale lock, whose message must say how to
clear it (`--unlock`), and `--rerun-incomplete` (set in every profile) redoes what was cut.
SHARDFLOW_FAULT_REPORT=<path> writes the per-rule table as JSON.
"""

import json
import os

import pytest

from shardflow.corpus.demo import DemoParams, build_demo_corpus
from tests.helpers import write_config
from tests.support import faults as F

pytestmark = pytest.mark.workflow

SEEDS = [int(s) for s in os.environ.get("SHARDFLOW_FAULT_SEEDS", "1").split(",") if s.strip()]
CONTROLLER_SHARE = float(os.environ.get("SHARDFLOW_FAULT_CONTROLLER_SHARE", "0.05"))
# Every rule the configured workflow runs (all five tasks plus retrieval).
RULES = [
    "split", "embed", "merge", "verify", "report", "provenance", "landing", "neighbours", "merge_neighbours",
    "search_queries", "embed_search_queries", "search",
    "retrieval_prepare", "retrieval_queries", "retrieval_qrels", "embed_queries", "retrieval_evaluate",
    "summarise", "merge_summaries", "evaluate_summaries", "summarise_report",
    "train_tokenizer", "tokenize", "gather_shards", "train",
]
# Outputs that record how the run went, not what it computed: per-job stats (resumed
# parts, attempts), job tables and the landing page (wall times, which jobs ran again).
VOLATILE = (".stats.json", "jobs.json", "report.rst")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A corpus with references for summarisation, and a tiny BEIR set (stdlib docstrings)."""
    root = tmp_path_factory.mktemp("fault-inputs")
    build_demo_corpus(str(root / "demo.jsonl"), DemoParams(max_docs=50, min_words=20))
    records = [json.loads(line) for line in (root / "demo.jsonl").read_text().splitlines()]
    with open(root / "corpus.jsonl", "w") as fh:
        for r in records[:30]:
            fh.write(json.dumps({"id": r["id"], "text": r["text"], "highlights": r["text"].split(". ")[0]}) + "\n")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = records[30:50]
    with open(beir / "corpus.jsonl", "w") as fh:
        for i, r in enumerate(docs):
            fh.write(json.dumps({"_id": f"d{i}", "title": "", "text": r["text"]}) + "\n")
    with open(beir / "queries.jsonl", "w") as fh:
        for q in range(4):
            fh.write(json.dumps({"_id": f"q{q}", "text": docs[2 * q]["text"]}) + "\n")
    with open(root / "queries.jsonl", "w") as fh:
        for q in range(3):
            fh.write(json.dumps({"id": f"s{q}", "text": records[3 * q]["text"]}) + "\n")
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{q}\td{2 * q}\t1\n" for q in range(4))
    )
    cfg = write_config(
        root / "config.yaml",
        dataset="fm",
        tasks=["embedding", "neighbours", "search", "summarisation", "training"],
        n_chunks=1,
        input={"path": str(root / "corpus.jsonl")},
        embedding={"window": 4},
        summarise={"method": "lead", "reference_field": "highlights", "window": 4},
        shards={"tokens_per_shard": 4000, "val_fraction": 0.3},
        train=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=60, eval_interval=20,
                   eval_windows=4, checkpoint_interval=10, warmup_iters=5, sample_tokens=10),
        retrieval={"path": str(beir), "name": "fmr", "n_chunks": 1, "top_k": 100},
        search={"queries": str(root / "queries.jsonl"), "k": 3},
        resources={r: {"threads": 1} for r in ("embed", "embed_queries", "neighbours", "embed_search_queries", "search",
                                               "summarise", "train")},
        # Resume state outside the working directory, as on a volume that outlives a node.
        gpu_jobs={"resume_dir": str(root / "volume")},
    )
    return cfg


def _reference(work, cfg, rules):
    """The uninterrupted run of `cfg`, watched: each rule's first job's duration plans the faults."""
    proc, watcher = F.run_watched(work, cfg)
    assert proc.returncode == 0, proc.stdout[-6000:]
    missing = [r for r in rules if r not in watcher.durations]
    assert not missing, f"rules not seen running: {missing}; seen {watcher.durations}"
    return F.results(work), watcher.durations


@pytest.fixture(scope="module")
def reference(tmp_path_factory, inputs):
    """The uninterrupted run, watched: each rule's first job's duration plans the faults."""
    return _reference(tmp_path_factory.mktemp("fault-reference"), inputs, RULES)


def _unlock(work, cfg):
    proc = F.subprocess.run(F.snakemake_cmd(work, cfg, "--unlock"), cwd=work, env=F.offline_env(),
                            capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_rule_killed_at_a_seeded_point_reruns_to_identical_outputs(seed, inputs, reference, tmp_path, record_property):
    _kill_every_rule(seed, inputs, RULES, reference, tmp_path / "work", record_property)


def _kill_every_rule(seed, inputs, rules, reference, work, record_property, volatile=VOLATILE, matrix=None):
    """The matrix over `rules` of the workflow `inputs` (a config file, its resume volume
    beside it) configures, against `reference` (its uninterrupted run's outputs and each
    rule's shortest job); `matrix` names it in the report (the main one is unnamed)."""
    ref, durations = reference
    work.mkdir()
    faults = F.plan_faults(durations, rules, seed, CONTROLLER_SHARE)
    counts = {"runs": 0, "unlocks": 0}
    seen = dict(durations)  # each rule's shortest job in any run so far

    def run_until_done(*extra):
        """Rerun (with `extra`) until Snakemake succeeds, checking after every run that
        no output differs from the uninterrupted run."""
        while True:
            pending = {r: f for r, f in faults.items() if not f.injected}
            proc, watcher = F.run_watched(work, inputs, "--rerun-incomplete", "--keep-going", *extra, faults=pending)
            counts["runs"] += 1
            for r, d in watcher.durations.items():
                seen[r] = min(d, seen.get(r, d))
            assert counts["runs"] < 4 * len(rules), proc.stdout[-6000:]
            if "Directory cannot be locked" in proc.stdout:
                # A controller fault left Snakemake's lock: the message must say how to clear it.
                assert "--unlock" in proc.stdout, proc.stdout[-3000:]
                _unlock(work, inputs)
                counts["unlocks"] += 1
                continue
            problems = F.compare(ref, F.results(work), complete=False, volatile=volatile)
            assert not problems, f"seed {seed}, after run {counts['runs']}: {problems}"
            if proc.returncode == 0:
                return

    run_until_done()
    retried, fractions = [], {r: f.delay_s / durations[r] for r, f in faults.items()}
    for attempt in range(3):
        missed = [r for r, f in faults.items() if not f.injected]
        if not missed:
            break
        # A rule's jobs all ended before the planned point (they ran faster than in the
        # reference): force just those jobs again, killing each at the same fraction
        # (halved per attempt) of the shortest time its jobs took so far, as a job fault;
        # then finish the forced jobs (Snakemake removed their outputs, and a missing
        # intermediate file behind newer outputs does not make it rerun anything) and the
        # rest of the workflow.
        for r in missed:
            faults[r].delay_s, faults[r].mode = fractions[r] / 2**attempt * seen[r], "job"
        retried += missed
        jobs = [F.job_rule(r) for r in missed]
        run_until_done("--forcerun", *jobs, "--until", *jobs)
        run_until_done()

    final = F.results(work)
    assert F.compare(ref, final, complete=True, volatile=volatile) == []
    injected = [r for r, f in faults.items() if f.injected]
    assert injected == rules, f"faults missed {sorted(set(rules) - set(injected))} (retried {retried})"
    assert F.leftovers(work) == [], "temporary files of interrupted writes left behind"
    volume = inputs.parent / "volume"
    assert not [p for p in volume.rglob("*") if p.is_file()], "resume parts left after the outputs were written"
    table = [
        {"rule": f.rule, "mode": f.mode, "delay_s": round(f.delay_s, 3), "injected": f.injected,
         "identical": f.injected, "lost": 0}
        for f in faults.values()
    ]
    summary = {"seed": seed, **({"matrix": matrix} if matrix else {}), "faults": len(table),
               "injected": sum(t["injected"] for t in table), "retried_after_a_miss": retried, **counts,
               "table": table}
    print(json.dumps(summary))
    record_property("faults", json.dumps(summary))
    if os.environ.get("SHARDFLOW_FAULT_REPORT"):
        path = os.environ["SHARDFLOW_FAULT_REPORT"]
        previous = json.loads(open(path).read()) if os.path.exists(path) else []
        with open(path, "w") as fh:
            json.dump([*previous, summary], fh, indent=1)


# ------------------------------------------------------------------ the extended matrix

EXTENDED = os.environ.get("SHARDFLOW_FAULT_EXTENDED") == "1"
# The rules only another config runs: chunking.by: source's split_source jobs (one per
# source file) and their collector (split_fm: collect_sources, not the split above), a
# training sweep's jobs, its spec and collection, method stored's scoring, and the
# reproduction check. Not here: build_demo_corpus (it runs only with input.path null, where
# neither a glob of sources nor stored summaries exist, and writes under resources/, which
# the comparison does not read), and the summarise sweep's rules (a summarise sweep under
# method stored is a parse-time error: no summarise job to vary): SWEEP_RULES below has
# them, with the embed and retrieval sweeps' rules, in a config of its own.
EXTENDED_RULES = ["split_source", "split", "sweep_train", "sweep_spec", "collect_sweep_lr", "score_stored_summaries",
                  "verify_reproduction"]
# How the sweep's run went, which differs between two runs without a fault: its runs and
# summary tables hold each job's wall time (wall_time_s and its mean, which the Parquet
# comparison keeps) and, in the CSVs, the train metrics that time the job
# (tokens_per_second, train_seconds_total); cost.json sums the jobs' seconds and counts
# the attempts a fault killed. What the points computed stays compared: each job's
# metrics.json, table.md, table.tex, best.json and the plots.
EXTENDED_VOLATILE = VOLATILE + ("/runs.parquet", "/runs.csv", "/summary.parquet", "/summary.csv", "/cost.json")


@pytest.fixture(scope="module")
def extended_inputs(tmp_path_factory):
    """Three small source files (a glob: chunking.by: source), each record with a
    reference and a stored summary; training with a 2-point learning-rate sweep of one
    seed, and a reproduction check of the main run's validation loss."""
    root = tmp_path_factory.mktemp("fault-extended-inputs")
    build_demo_corpus(str(root / "demo.jsonl"), DemoParams(max_docs=30, min_words=20))
    records = [json.loads(line) for line in (root / "demo.jsonl").read_text().splitlines()]
    (root / "data").mkdir()
    for part in range(3):
        with open(root / "data" / f"part-{part}.jsonl", "w") as fh:
            for r in records[10 * part : 10 * (part + 1)]:
                sentences = r["text"].split(". ")
                fh.write(json.dumps({"id": r["id"], "text": r["text"], "highlights": sentences[0],
                                     "summary": ". ".join(sentences[:2])}) + "\n")
    return write_config(
        root / "config.yaml",
        dataset="fm",
        tasks=["summarisation", "training"],
        n_chunks="auto",
        input={"path": str(root / "data" / "part-*.jsonl")},
        chunking={"by": "source"},
        summarise={"method": "stored", "stored_field": "summary", "reference_field": "highlights"},
        shards={"tokens_per_shard": 4000, "val_fraction": 0.3},
        train=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=40, eval_interval=20,
                   eval_windows=4, checkpoint_interval=10, warmup_iters=5, sample_tokens=10),
        sweeps={"lr": {"stage": "train", "grid": {"train.lr": [1.0e-3, 2.0e-3]}, "seeds": [0],
                       "metrics": {"best_val_loss": "min"}}},
        # Wide: the check has to run (and pass alike after every fault), not pin the model.
        reproduce={"name": "fault-matrix",
                   "expect": {"metrics": {"best_val_loss": {"value": 4.0, "tolerance": 2.0}}}},
        resources={"train": {"threads": 1}},
        gpu_jobs={"resume_dir": str(root / "volume")},
    )


@pytest.fixture(scope="module")
def extended_reference(tmp_path_factory, extended_inputs):
    return _reference(tmp_path_factory.mktemp("fault-extended-reference"), extended_inputs, EXTENDED_RULES)


@pytest.mark.skipif(not EXTENDED, reason="the extended fault matrix: make test-faults (SHARDFLOW_FAULT_EXTENDED=1)")
@pytest.mark.parametrize("seed", SEEDS)
def test_every_rule_of_the_extended_config_killed_at_a_seeded_point_reruns_to_identical_outputs(
    seed, extended_inputs, extended_reference, tmp_path, record_property
):
    _kill_every_rule(seed, extended_inputs, EXTENDED_RULES, extended_reference, tmp_path / "work", record_property,
                     volatile=EXTENDED_VOLATILE, matrix="extended")


# The rules only a config with sweeps of the other three stages runs (the training sweep
# is above): an embed sweep's jobs (its chunks, merge, verification, metrics against the
# main run's vectors) and collection, a retrieval sweep's shared embedding set (its
# corpus chunks, merge, verification and queries: the point whose max_length is not the
# main run's) and its evaluation and collection, and an abstractive summarise sweep's
# jobs, merge, evaluation and collection. sweep_spec runs here too, and is above.
SWEEP_RULES = [
    "sweep_embed_chunk", "sweep_embed_merge", "sweep_embed_verify", "sweep_embed_metrics", "collect_sweep_budget",
    "sweep_embed", "sweep_merge", "sweep_verify", "sweep_embed_queries", "sweep_retrieval_evaluate",
    "collect_sweep_maxlen",
    "sweep_summarise", "sweep_merge_summaries", "sweep_evaluate_summaries", "collect_sweep_beams",
]
# Besides the sweeps' runs and summary tables and cost.json (above), an embed sweep job's
# metrics.json records how its jobs ran: seconds and rates (job_seconds, encode_seconds,
# warmup_seconds, steady_*, job_items_per_s; the comparison drops items_per_s and
# tokens_per_s itself), max_rss_mb, and what a fault killed (earlier_attempts,
# earlier_attempt_seconds, records_resumed, records_paid, and tokens, which counts only
# the records the final attempts computed: shardflow.embed.report.chunk_totals). Named by
# full path, so the retrieval and summarise sweeps' metrics.json (their scores) stay
# compared; so do the embed jobs' vectors and verification, from which the agreement with
# the main run is computed, and the embed sweep's table, best.json and plots (it ranks by
# that agreement alone, no rate).
SWEEP_VOLATILE = EXTENDED_VOLATILE + tuple(
    f"results/sweeps/budget/token_budget={b}/seed=0/metrics.json" for b in (512, 1024)
)


@pytest.fixture(scope="module")
def sweep_inputs(tmp_path_factory, inputs):
    """The main matrix's corpus (references in `highlights`) and BEIR set, 2 chunks each,
    with a tiny random BERT embedder and a tiny random BART summariser (built offline);
    sweeps of one seed over 2 points: embed (embedding.token_budget), retrieval
    (embedding.max_length: the main run's 32, which reads the main run's embeddings, and
    24, which embeds its own set) and summarise (generation.num_beams)."""
    from tests.support import tiny_generators, tiny_models

    root = tmp_path_factory.mktemp("fault-sweep-inputs")
    embedder = tiny_models.build_bert_mean(root / "models")
    summariser = tiny_generators.build_bart(root / "models", max_new_tokens=12)
    return write_config(
        root / "config.yaml",
        dataset="fm",
        # Embedding only: the embed sweep compares with the main run's vectors; the
        # summarise sweep runs its own jobs on the chunks.
        tasks=["embedding"],
        n_chunks=2,
        input={"path": str(inputs.parent / "corpus.jsonl")},
        embedding={"model": str(embedder), "window": 4, "max_length": 32},
        summarise={"method": "abstractive", "model": str(summariser), "reference_field": "highlights", "window": 4},
        retrieval={"path": str(inputs.parent / "beir"), "name": "fmr", "n_chunks": 2, "top_k": 100},
        sweeps={
            "budget": {"stage": "embed", "grid": {"embedding.token_budget": [512, 1024]}, "seeds": [0],
                       "metrics": {"agreement.cosine_min": "max"}},
            "maxlen": {"stage": "retrieval", "grid": {"embedding.max_length": [32, 24]}, "seeds": [0],
                       "metrics": {"ndcg_at_10": "max"}},
            "beams": {"stage": "summarise", "grid": {"summarise.generation.num_beams": [1, 2]}, "seeds": [0],
                      "metrics": {"rouge1": "max"}},
        },
        resources={r: {"threads": 1} for r in ("embed", "embed_queries", "summarise")},
        gpu_jobs={"resume_dir": str(root / "volume")},
    )


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory, sweep_inputs):
    return _reference(tmp_path_factory.mktemp("fault-sweep-reference"), sweep_inputs, SWEEP_RULES)


@pytest.mark.skipif(not EXTENDED, reason="the extended fault matrix: make test-faults (SHARDFLOW_FAULT_EXTENDED=1)")
@pytest.mark.parametrize("seed", SEEDS)
def test_every_sweep_rule_killed_at_a_seeded_point_reruns_to_identical_outputs(
    seed, sweep_inputs, sweep_reference, tmp_path, record_property
):
    _kill_every_rule(seed, sweep_inputs, SWEEP_RULES, sweep_reference, tmp_path / "work", record_property,
                     volatile=SWEEP_VOLATILE, matrix="sweeps")


# ------------------------------------------------------------------------ disk full

EMBED_TARGETS = ["results/fm/embeddings.npy", "results/fm/ids.parquet"]


@pytest.fixture
def small_results(tmp_path):
    """results/ on a 1 MiB tmpfs of its own (root, as in CI; elsewhere the test skips)."""
    work = tmp_path / "work"
    results = work / "results"
    results.mkdir(parents=True)
    mount = F.subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(results)],
                             capture_output=True, text=True)
    if mount.returncode != 0:
        message = f"cannot mount a tmpfs for the disk-full test: {mount.stderr.strip()}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield work
    finally:
        F.subprocess.run(["umount", "-l", str(results)], capture_output=True)


def test_a_full_disk_stops_the_run_naming_the_file_and_a_rerun_after_freeing_space_completes(
    inputs, reference, small_results
):
    ref, _ = reference
    work = small_results
    manifest = "results/fm/chunks/manifest.json"
    proc, _ = F.run_watched(work, inputs, manifest)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # Fill the filesystem but for 8 KiB: the split's outputs fit, the embeddings do not.
    ballast = work / "results" / "ballast"
    free = os.statvfs(work / "results").f_bavail * os.statvfs(work / "results").f_frsize
    ballast.write_bytes(b"\0" * (free - 8192))

    # Without retries: a full disk fails each attempt alike (3 by default, each loading the model).
    proc, _ = F.run_watched(work, inputs, *EMBED_TARGETS, "--config", "resources={embed: {retries: 0}}")
    assert proc.returncode != 0
    assert "Trying to restart job" not in proc.stdout, proc.stdout[-4000:]
    log = (work / "logs/embed/fm/chunk_0.log").read_text()
    assert "No space left on device while writing " in log and "bytes free there); nothing was kept" in log, log[-3000:]
    standing = {rel: fp for rel, fp in F.results(work).items() if rel != "results/ballast"}
    problems = F.compare(ref, standing, complete=False, volatile=VOLATILE)
    assert problems == [], problems  # nothing half-written stands as an output
    assert F.leftovers(work) == []

    ballast.unlink()
    proc, _ = F.run_watched(work, inputs, *EMBED_TARGETS)
    assert proc.returncode == 0, proc.stdout[-4000:]
    got = F.results(work)
    for rel in EMBED_TARGETS + ["results/fm/chunks/chunk_0.jsonl"]:
        assert got[rel] == ref[rel], rel
