"""The whole graph is known at parse time: dry runs, DAG, lint, formatting."""

import json
import os
import re
import subprocess

import pytest

from tests.helpers import (
    BIN,
    REPO,
    SNAKEMAKE,
    assert_status_reads_the_planned_files,
    job_counts,
    offline_env,
    snakemake,
    write_config,
)

pytestmark = [pytest.mark.workflow, pytest.mark.dryrun]


def test_dry_run_lists_every_chunk_job_before_any_data_exists(tmp_path):
    # --default-resources: disk_mb sized from inputs not yet written, as the eks profile
    # does, which made Snakemake 9.27 warn of a coroutine never awaited (rules/common.smk).
    proc = snakemake(tmp_path, "-n", "--default-resources", "--config", "n_chunks=16")
    out = proc.stdout
    assert "never awaited" not in proc.stdout + proc.stderr
    counts = job_counts(out)
    assert counts["embed"] == 16
    assert counts["split_demo"] == counts["merge"] == counts["verify"] == counts["report"] == 1
    assert not (tmp_path / "results").exists()
    assert assert_status_reads_the_planned_files(out, "embed") == 16  # make status's view of the jobs
    assert "Would remove temporary output" not in out  # embedding.keep_chunk_vectors: true


def test_nested_command_line_values_read_as_yaml_would(tmp_path):
    """Snakemake reads values nested in --config as strings ('3', '8', ['32', '64']): the
    config check reads them as a config file would, so the documented form works."""
    out = snakemake(
        tmp_path, "-n", "--config", "n_chunks=3",
        "embedding={window: 8, length_buckets: [32, 64], compile: false, keep_chunk_vectors: false}",
        "resources={embed: {mem_mb: 9000}}",
    ).stdout
    assert job_counts(out)["embed"] == 3 and "mem_mb=9000" in out, out[-3000:]
    # keep_chunk_vectors: false flags only the chunks' vectors temp(): merge's inputs.
    removed = re.findall(r"^Would remove temporary output (\S+)$", out, re.M)
    assert sorted(removed) == [f"results/demo/embed/embed_{i}.npy" for i in range(3)], out[-3000:]
    # The attempt reaches a GPU job as a resource (job_attempt), for shardflow.core.failures.
    assert "runtime=120, attempt=1, mem_mb=9000" in out, out[-3000:]


def test_dag_and_rulegraph_show_every_chunk(tmp_path):
    dag = snakemake(tmp_path, "--dag", "--config", "n_chunks=5").stdout
    assert dag.count("embed\\nchunk: ") == 5 or dag.count("label = \"embed") == 5
    rulegraph = snakemake(tmp_path, "--rulegraph").stdout
    for rule in ("split", "embed", "merge", "verify", "report"):
        assert rule in rulegraph
    svg = subprocess.run(["dot", "-Tsvg"], input=dag, capture_output=True, text=True, check=True).stdout
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_dag_reads_as_the_pipeline_at_100_chunks(tmp_path):
    """Per-chunk jobs have one edge in (split) and one out (merge); everything after
    merge reads its one job table, so the edge count grows as 2 per chunk."""
    import re

    dag = snakemake(tmp_path, "--dag", "--config", "n_chunks=100").stdout
    labels = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)', dag, re.M))
    edges = [(labels[a], labels[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", dag, re.M)]
    assert sum(1 for _, b in edges if b == "embed") == 100
    assert {b for a, b in edges if a == "embed"} == {"merge"} and sum(1 for a, _ in edges if a == "embed") == 100
    # The rest of the graph does not grow with the chunk count.
    rest = [e for e in edges if "embed" not in e]
    assert len(rest) <= 20, sorted(rest)


def test_a_key_of_the_old_layout_names_its_new_place(tmp_path):
    cfg = write_config(tmp_path / "old.yaml", embedding={"threads": 2, "gpu_pinning": "slots"})
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'embedding.threads' has moved: set 'resources.embed.threads" in out
    assert "config key 'embedding.gpu_pinning' has moved: set 'gpu_jobs.pinning' instead" in out


def test_misspelt_key_stops_the_run_naming_it(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", embedding={"token_budjet": 100})
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    assert "unknown config key 'token_budjet' in 'embedding'" in proc.stdout + proc.stderr


def test_abstractive_summaries_without_a_model_stop_the_dry_run(tmp_path):
    proc = snakemake(tmp_path, "-n", "--config", "tasks=[summarisation]", "summarise={method: abstractive}", check=False)
    assert proc.returncode != 0
    assert "summarise.method is abstractive but summarise.model is null" in proc.stdout + proc.stderr


def test_a_summarise_sweep_over_stored_summaries_stops_the_dry_run_naming_it(tmp_path):
    """Method stored runs no summarise job (it was a bare KeyError: 'evaluate_summaries')."""
    cfg = write_config(
        tmp_path / "stored.yaml",
        tasks=["summarisation"],
        summarise={"method": "stored", "stored_field": "summary", "reference_field": "reference"},
        sweeps={"ks": {"stage": "summarise", "grid": {"summarise.k": [1, 2]}, "seeds": [0],
                       "metrics": {"rouge1": "max"}}},
    )
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "sweep 'ks': summarise.method is stored, which scores the summaries" in out, out[-3000:]


def test_every_sweep_problem_stops_the_dry_run_in_one_error(tmp_path):
    """A bad key, a key the method ignores and an unknown metric, in three sweeps, and
    what --config would drop: one error names them all (they came one a run, each after
    the last was fixed)."""
    def sweep(grid, metric="rouge1"):
        return {"stage": "summarise", "grid": grid, "seeds": [0], "metrics": {metric: "max"}}

    cfg = write_config(
        tmp_path / "sweeps.yaml",
        tasks=["summarisation"],
        summarise={"method": "lead", "reference_field": "reference"},
        sweeps={"ok": sweep({"summarise.k": [1, 2]}), "ignored": sweep({"summarise.mmr_lambda": [0.5, 0.7]}),
                "unknown": sweep({"summarise.kk": [1]}), "metric": sweep({"summarise.k": [3]}, "rouge9"),
                "window": sweep({"summarise.window": [1, 2]})},
    )
    # And what the command line drops: Snakemake reads only the last --config's entries
    # (n_chunks=2 would be lost without a word), and a key written twice in a value.
    config = ["--config", "n_chunks=2", "--config", "report={currency: EUR, currency: USD}"]
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), *config, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for line in ("--config is given 2 times, and Snakemake reads only the last one's entries (report): n_chunks=2",
                 "--config:1: report: key 'currency' is written again",
                 "sweep 'unknown': unknown parameter 'summarise.kk'",
                 "sweep 'ignored': summarise.method lead does not read summarise.mmr_lambda",
                 "sweep 'metric': metric 'rouge9' is not one a summarise job writes",
                 "sweep 'window': summarise.window only sizes the resumable parts of summarise.method lead"):
        assert line in out, out[-3000:]
    assert "sweep 'ok'" not in out


def test_models_this_machine_lacks_stop_the_dry_run_all_at_once_naming_their_keys(tmp_path):
    """A mistyped model folder, a sweep point's, and a sweep that lacks what its stage
    needs: one parse error names them all, instead of GPU jobs that queue, fail and are
    resubmitted, one problem per attempt. A model whose jobs' outputs all exist is only
    warned of."""
    cfg = write_config(
        tmp_path / "models.yaml",
        tasks=["embedding", "summarisation"],
        embedding={"model": str(tmp_path / "no-such-encoder")},
        summarise={"method": "extractive", "encoder": "default"},
        sweeps={"enc": {"stage": "summarise", "grid": {"summarise.encoder": ["default", "~/no-such-encoder"]},
                        "seeds": [0], "metrics": {"rouge1": "max"}},
                "emb": {"stage": "embed", "grid": {"embedding.model": ["~/no-such-embedder"]}, "seeds": [0],
                        "metrics": {"items_per_s": "max"}}},
    )
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "sweep 'enc' (stage summarise) needs summarise.reference_field" in out, out[-3000:]
    assert f"embedding.model '{tmp_path}/no-such-encoder': no such folder; the jobs that load it would fail" in out
    assert "summarise.encoder '~/no-such-encoder' (sweep 'enc', point encoder=_7e_2fno-such-encoder): no such folder" in out
    assert "embedding.model '~/no-such-embedder' (sweep 'emb', point model=_7e_2fno-such-embedder): no such folder" in out
    assert "summarise.encoder 'default'" not in out  # the bundled one is there
    # Models only the nodes have (a node-local disk): the check can be turned off.
    env = {**offline_env(), "SHARDFLOW_SKIP_MODEL_CHECK": "1"}
    snakemake(tmp_path, "-n", "--config", f"embedding={{model: {tmp_path}/no-such-encoder}}", env=env)
    # A finished run whose model has since moved: every output of the jobs that load it
    # exists, so a warning; a model whose jobs have work to do still stops the run.
    loaded = ["embed/embed_0.npy", "embed/embed_0.ids.parquet", "embed/embed_0.stats.json", "verification.json"]
    for name in [*loaded, "provenance.json"]:
        (tmp_path / "results" / "demo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / "demo" / name).touch()
    moved = f"embedding={{model: {tmp_path}/no-such-encoder}}"
    encoder = "summarise={method: extractive, encoder: ~/no-such-encoder}"
    config = ["n_chunks=1", "tasks=[embedding, summarisation]", moved, encoder]
    proc = snakemake(tmp_path, "-n", "--config", *config, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (
        f"embedding.model '{tmp_path}/no-such-encoder': no such folder; all 5 outputs of the jobs that load it "
        "exist, so none of them needs it unless it must rerun"
    ) in out, out[-3000:]
    assert (
        "summarise.encoder '~/no-such-encoder': no such folder; the jobs that load it would fail "
        "(results/demo/summarise/summaries_0.jsonl is not there yet)"
    ) in out
    assert "embedding.model" not in out[out.index("ValueError") :]  # the error names the encoder alone


def test_a_model_changed_in_place_since_its_jobs_ran_is_named_and_stops_a_run_that_would_mix_two(tmp_path):
    """Snakemake does not see a model's files: a model replaced in its folder reran
    nothing and said nothing. Now a run with jobs still to do, which would put two
    models' vectors in one index, stops; `--forcerun embed` remakes them all and is let
    through (`make status` names it too: tests/unit/workflow/test_status.py)."""
    model = tmp_path / "encoder"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    made = {"role": "embedding", "model": {"path": str(model), "sha256": "0" * 64}}
    embed = tmp_path / "results" / "demo" / "embed"
    embed.mkdir(parents=True)
    for i in range(2):
        for suffix in ("npy", "ids.parquet"):
            (embed / f"embed_{i}.{suffix}").touch()
        stats = embed / f"embed_{i}.stats.json"
        stats.write_text(json.dumps({"made_with": made}))
        os.utime(stats, (1_000_000_000, 1_000_000_000))  # written before the model's files
    config = ["n_chunks=2", f"embedding={{model: {model}}}"]
    (embed / "embed_1.stats.json").unlink()  # (all there: a warning instead, tests/unit/workflow/test_plan.py)
    proc = snakemake(tmp_path, "-n", "--config", *config, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"embedding.model '{model}' ({model}) changed since 1 of the jobs that load it ran" in out, out[-3000:]
    assert "results/demo/embed/embed_1.stats.json is not there yet): this run would mix the two models' outputs" in out
    proc = snakemake(tmp_path, "-n", "--forcerun", "embed", "--config", *config)
    assert "changed since" not in proc.stdout + proc.stderr


def test_mistyped_value_stops_the_run_naming_it(tmp_path):
    proc = snakemake(tmp_path, "-n", "--config", "n_chunks=many", check=False)
    assert proc.returncode != 0
    assert "config key 'n_chunks'" in proc.stdout + proc.stderr


def test_local_profile_works_as_typed_from_the_repo_root():
    # `make setup` links ./local -> profiles/local; the test suite runs after it.
    assert (REPO / "local").resolve() == (REPO / "profiles" / "local").resolve()
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--profile", "local", "-n", "--config", "dataset=dryrun_profile_check"],
        cwd=REPO,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout)["embed"] == 4


def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--lint"], cwd=REPO, env=offline_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _named_inputs() -> tuple[dict, dict]:
    """From the rules files (snakefmt's layout): each rule's named `input:` keys (None when
    its input is positional or unpacked), and each `use rule BASE as NAME with:`'s base."""
    import re

    keys, bases = {}, {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        lines = path.read_text().splitlines()

        def depth(k, lines=lines):
            return len(lines[k]) - len(lines[k].lstrip())

        for i, line in enumerate(lines):
            m = re.match(r"^(\s*)(?:rule (\w+):|use rule (\w+) as (\w+) with:)\s*$", line)
            if not m:
                continue
            indent, name = len(m.group(1)), m.group(2) or m.group(4)
            if m.group(3):
                bases[name] = m.group(3)
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or depth(j) > indent):
                if lines[j] == " " * (indent + 4) + "input:":
                    named, other, k = set(), False, j + 1
                    while k < len(lines) and (not lines[k].strip() or depth(k) > indent + 4):
                        text = lines[k].strip()
                        if text and depth(k) == indent + 8:
                            found = re.match(r"(\w+)=", text)
                            if found:
                                named.add(found.group(1))
                            elif text[0] not in "#)]}":
                                other = True
                        k += 1
                    keys[name] = None if other else named
                j += 1
    return keys, bases


def test_a_rule_used_with_new_inputs_keeps_every_named_input_of_its_base():
    """`use rule X as Y with: input:` replaces X's whole input block: an input added to X
    later (evaluate_summaries' split rejects) was missing from Y, and every summarise
    sweep failed in its evaluation job."""
    keys, bases = _named_inputs()
    assert {"sweep_evaluate_summaries", "sweep_merge", "sweep_train"} <= set(bases)
    for derived, base in bases.items():
        if keys.get(derived) is not None and keys.get(base) is not None:
            assert keys[derived] == keys[base], f"rule {derived}: inputs {keys[derived]} differ from {base}'s {keys[base]}"


def test_snakefmt_check_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "rules/"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_eks_profile_with_site_variables_unset_stops_with_one_line_naming_them():
    env = offline_env(SHARDFLOW_S3_PREFIX="runs/x")
    for name in ("SHARDFLOW_S3_BUCKET", "SHARDFLOW_IMAGE"):
        env.pop(name, None)
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--profile", "eks", "-n"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    lines = [x for x in (proc.stdout + proc.stderr).splitlines() if not x.startswith("Using profile")]
    assert lines == [
        "profile eks: set the environment variables SHARDFLOW_S3_BUCKET, SHARDFLOW_IMAGE (profiles/README.md, 'eks')"
    ], proc.stdout + proc.stderr


def test_an_unexpanded_variable_in_any_profile_stops_the_run_naming_it(tmp_path):
    """A site profile (e.g. profiles/slurm with its partition line uncommented) whose
    $VARIABLE is unset: one line at parse time, not an sbatch or S3 error later."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "config.yaml").write_text(
        'default-resources:\n  slurm_partition: "$SHARDFLOW_TEST_PARTITION"\n  mem_mb: 1000\n'
        'set-resources:\n  embed: {slurm_partition: "${SHARDFLOW_TEST_GPU_PARTITION}", mem_mb: 2000}\n'
    )
    proc = snakemake(tmp_path, "-n", "--profile", str(tmp_path / "site"), check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "unset environment variables SHARDFLOW_TEST_PARTITION, SHARDFLOW_TEST_GPU_PARTITION in the profile "
        "(default-resources slurm_partition uses $SHARDFLOW_TEST_PARTITION; "
        "set-resources embed:slurm_partition uses $SHARDFLOW_TEST_GPU_PARTITION)"
    ), proc.stderr


def test_a_profiles_gpu_for_jobs_that_run_on_the_cpu_is_named_at_parse_time(tmp_path):
    """With gpu_jobs.device cpu the GPU rules' jobs have no gpu (train's is 0), yet a
    gpu_model that set-resources gives their rule reaches sbatch as a GPU request (the
    slurm plugin's; tests/unit/workflow/test_site.py): the parse names each, for the GPU
    rules of the run only (no retrieval, no sweep here), then for the CPU rules (merge),
    whose jobs never use a GPU; then a default-resources gpu, with the CPU rules it
    reaches, and a default-resources gpu_manufacturer, which with train's gpu of 0 gets
    its pods the Kubernetes GPU toleration."""
    cfg = write_config(tmp_path / "c.yaml", tasks=["embedding", "training"], n_chunks=2, gpu_jobs={"device": "cpu"})
    proc = snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles/slurm"), "--configfile", str(cfg),
                     "--set-resources", "embed:gpu_model=a100", "embed:slurm_partition=gpu", "train:gpu_model=a100",
                     "embed_queries:gpu_model=a100", "sweep_train:gres=gpu:1", "merge:gpu_model=a100",
                     "--default-resources", "mem_mb=1000", "gpu=1", "gpu_manufacturer=nvidia")
    lines = (proc.stdout + proc.stderr).splitlines()
    named = [line for line in lines if line.startswith("set-resources")]
    assert named == [
        f"set-resources {rule}:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:{n} for each {rule} job, "
        "which runs on the CPU (gpu_jobs.device cpu) and uses no GPU; leave it out of the profile for this run "
        "(profiles/README.md, slurm)"
        for rule, n in (("embed", 1), ("train", 0))
    ] + [
        "set-resources merge:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:1 for each merge job, "
        "which runs on the CPU (not a GPU rule) and uses no GPU; take it out of the profile (profiles/README.md, slurm)"
    ], proc.stdout + proc.stderr
    default = [line for line in lines if line.startswith("default-resources")]
    assert len(default) == 2, default
    assert default[0].startswith(
        "default-resources gpu_manufacturer=nvidia: the Kubernetes plugin gives its pod the nvidia.com/gpu toleration "
        "(a GPU node may take it) and a request of 0 GPUs for each train job, which runs on the CPU "
        "(gpu_jobs.device cpu) and uses no GPU but keeps gpu=0"
    ), default
    assert default[1].startswith(
        "default-resources gpu=1: the SLURM plugin asks sbatch for --gpus=1 and the Kubernetes plugin requests 1 GPU "
        "for its pod for each job of "
    ), default
    reached = re.search(r"for each job of (.*?)(;|, which use)", default[1]).group(1).split(", ")
    # merge is named with the other ask (its set-resources gpu_model makes it --gpus=a100:1)
    assert "split_demo" in reached and "gather_shards" in reached and not {"embed", "train", "merge"} & set(reached)


def test_inside_a_slurm_job_no_rule_retries_in_place(tmp_path):
    """The controller resubmits a failed SLURM job (`retries`); the job-mode Snakemake
    inside it must not also retry in place: every rule, new ones included, has its
    in-place retries off there (one_retry_layer), and keeps them everywhere else."""
    (tmp_path / "config").symlink_to(REPO / "config")
    (tmp_path / "Snakefile").write_text(
        f'include: "{REPO / "Snakefile"}"\n'
        'print("RETRIES", sorted((r.name, r._restart_times) for r in workflow.rules if r._restart_times))\n'
        'print("SPLIT", sorted((r.name, r._restart_times) for r in workflow.rules if r.name.startswith("split_")))\n'
    )
    cfg = write_config(tmp_path / "c.yaml", tasks=["embedding", "summarisation", "training"])

    def retries(*args, what="RETRIES", **env):
        cmd = [SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "-d", str(tmp_path), "-n", "--configfile", str(cfg), *args]
        proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(**env), capture_output=True, text=True, timeout=300)
        lines = {x.split(" ", 1)[0]: x for x in proc.stdout.splitlines() if x.startswith(("RETRIES", "SPLIT"))}
        assert what in lines or (what == "both" and len(lines) == 2), proc.stdout[-2000:] + proc.stderr[-3000:]
        return lines if what == "both" else lines[what]

    got = retries("--retries", "2", what="both")  # the slurm profile's `retries: 2`
    assert got["RETRIES"] == "RETRIES [('embed', 2), ('neighbours', 2), ('summarise', 2), ('train', 2)]"
    # A split that failed would fail again the same way (its input): never resubmitted
    # (a rule's own 0, unlike None, is not replaced by --retries).
    assert got["SPLIT"] == "SPLIT [('split_demo', 0)]"
    assert retries("--mode", "remote", SLURM_JOB_ID="12345") == "RETRIES []"


def test_a_verify_job_names_the_log_its_embed_rule_declares(tmp_path):
    """A failed row names its embed job's log (shardflow.embed.verify). The pattern comes
    from the embed rule itself (`chunk_logs`): a copy in the package drifted from it
    unnoticed but for a test, and a sweep's verify jobs named none, their embed jobs
    logging elsewhere."""
    (tmp_path / "config").symlink_to(REPO / "config")
    (tmp_path / "Snakefile").write_text(
        f'include: "{REPO / "Snakefile"}"\n'
        'print("VERIFY", rules.verify.rule.params.embed_log({"dataset": "demo"}, None))\n'
        'print("SWEEP", rules.sweep_embed_verify.rule.params.embed_log({"sweep": "b", "point": "p", "seed": "0"}, None))\n'
    )
    cfg = write_config(tmp_path / "c.yaml", sweeps={"b": {"stage": "embed", "grid": {"embedding.token_budget": [512]},
                                                          "seeds": [0], "metrics": {"items_per_s": "max"}}})
    cmd = [SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "-d", str(tmp_path), "-n", "--configfile", str(cfg)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=300)
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("VERIFY ", "SWEEP ")))
    assert said == {"VERIFY": "logs/embed/demo/chunk_{chunk}.log",
                    "SWEEP": "logs/sweeps/b/p/seed=0/embed_{chunk}.log"}, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f'    log:\n        "{said["VERIFY"].replace("demo", "{dataset}")}",\n' in (REPO / "rules/embed.smk").read_text()
