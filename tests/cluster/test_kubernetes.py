"""The `eks` path: `--executor kubernetes` (snakemake-executor-plugin-kubernetes 0.5.1)
with the site profile profiles/eks, data on a real S3 server (SeaweedFS), against the
Kubernetes API server stand-in (tests/support/k8s_apiserver_standin.py: NOT a cluster;
each Job runs as a local process, and every Job spec the plugin sends is kept for the
assertions below). The real workflow for results (compared bit for bit with the local
run) and for the profile's dry run; the tiny stand-in workflow for failures.

Strict mode answers as a real API server does where the plugin trips (422 for a GPU
request without a limit, 400 for a log read with previous=true); the happy path is
run in strict mode too, since that is what EKS will do."""

import base64
import json
import os
import re
import subprocess
import time

import pytest
import yaml

from tests.helpers import assert_no_secrets, job_counts
from tests.support.k8s_apiserver_standin import KubernetesApiServerStandin

pytestmark = pytest.mark.cluster

NAMESPACE = "shardflow"  # profiles/eks: kubernetes-namespace
SERVICE_ACCOUNT = "shardflow-runner"  # profiles/eks: kubernetes-service-account-name
IMAGE = "registry.example.invalid/shardflow:test"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def api(tmp_path, request):
    strict = getattr(request, "param", True)
    with KubernetesApiServerStandin(tmp_path / "k8s", strict=strict, namespaces=(NAMESPACE,)) as server:
        yield server


def run_eks(api, s3, prefix, workflow_dir, sm, *extra, timeout_s=240):
    """`snakemake --profile profiles/eks` with the profile's site values from the
    environment and the local S3 server's endpoint and (test-only) keys on the CLI.
    Flags, not AWS_* variables: Snakemake passes flag values to the pods through the
    run's secret, while the pods (which here inherit nothing) would not see the
    controller's environment -- on EKS they get credentials from IRSA instead."""
    env = sm.env(
        KUBECONFIG=str(api.kubeconfig_path),
        SHARDFLOW_S3_BUCKET=s3.bucket,
        SHARDFLOW_S3_PREFIX=prefix,
        SHARDFLOW_IMAGE=IMAGE,
    )
    args = [
        "--profile", str(sm.REPO / "profiles" / "eks"),
        "--storage-s3-endpoint-url", s3.endpoint_url,
        "--storage-s3-access-key", s3.access_key,
        "--storage-s3-secret-key", s3.secret_key,
        "--storage-s3-region", s3.region,
        "--seconds-between-status-checks", "1",  # the profile's 20 s would dominate here
        *extra,
    ]
    return sm.run(workflow_dir, *args, timeout_s=timeout_s, env=env)


def target_of(spec: dict) -> str:
    """'embed:chunk=a' or 'merge:' -- the job a Job spec runs."""
    command = spec["spec"]["template"]["spec"]["containers"][0]["args"][-1]
    return re.search(r"--target-jobs '([^']+)'", command).group(1)


def specs_by_target(api) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for spec in api.job_specs:
        out.setdefault(target_of(spec), []).append(spec)
    return out


def deleted_jobs(api) -> set[str]:
    return {path.rsplit("/", 1)[1] for method, path, _, code in api.requests
            if method == "DELETE" and "/jobs/" in path and code == 200}


def pod_log(api, job_name: str) -> str:
    (pod_dir,) = (api.root / "pods").glob(f"{job_name}-*")
    return (pod_dir / "container.log").read_text()


def marked_incomplete(workdir, query: str) -> bool:
    """Whether Snakemake's `.snakemake/incomplete` holds a marker for `query` (a short one:
    the marker is the urlsafe base64 of the file's name)."""
    return (workdir / ".snakemake" / "incomplete" / base64.urlsafe_b64encode(query.encode()).decode()).exists()


def delete_jobs(api, names: list[str]) -> None:
    """Delete Jobs through the API, as kubectl does (a Job already gone is fine)."""
    import kubernetes

    batch = kubernetes.client.BatchV1Api(kubernetes.config.new_client_from_config(str(api.kubeconfig_path)))
    for name in names:
        try:
            batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Foreground")
        except kubernetes.client.rest.ApiException as e:
            if e.status != 404:
                raise


def check_job_specs(api, s3, gpu_rules: set[str], memory: dict[str, str]) -> None:
    """Every Job spec the plugin sent, against what EKS needs: image, service account, no
    restarts, storage settings only as references into the run's secret (no credential
    in any spec, pod log or pod file), the profile's S3 retries, a GPU request (= limit,
    with the GPU toleration) exactly for the jobs of `gpu_rules`, memory request = limit
    (`memory`: rule -> the value expected); and the clean-up: each
    Job deleted once finished, the secret at the end, the pip shim met by every pod."""
    (secret,) = api.secrets_received
    secret_name = secret["metadata"]["name"]
    for target, specs in specs_by_target(api).items():
        rule = target.split(":")[0]
        assert len(specs) == 1, target
        spec = specs[0]
        pod = spec["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == IMAGE
        assert pod["serviceAccountName"] == SERVICE_ACCOUNT
        assert spec["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
        # Storage settings reach the pod only as references into the run's secret ...
        env = {e["name"]: e for e in container["env"]}
        assert {"SNAKEMAKE_STORAGE_S3_ACCESS_KEY", "SNAKEMAKE_STORAGE_S3_SECRET_KEY"} <= set(env)
        for var in env.values():
            assert "value" not in var
            assert var["valueFrom"]["secretKeyRef"]["name"] == secret_name
        # ... so no credential appears anywhere in the Job spec.
        text = json.dumps(spec)
        assert s3.secret_key not in text and s3.access_key not in text
        # The profile's S3 retries reach the Snakemake inside each pod (its uploads too).
        assert re.search(r"--storage-s3-retries '?12\b", container["args"][-1]), container["args"][-1]

        resources = container["resources"]
        assert resources["requests"]["memory"] == resources["limits"]["memory"], target  # scale: 0
        assert resources["requests"]["memory"] == memory.get(rule, resources["requests"]["memory"]), target
        if rule in gpu_rules:
            # gpu from the workflow config (resources.<rule>.gpu); gpu_manufacturer and
            # scale: 0 from profiles/eks default-resources, which names no rule.
            assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1", target
            assert GPU_TOLERATION in pod["tolerations"]
            assert not pod.get("nodeSelector")  # GPU nodes are found by the request + taint
        else:
            assert "nvidia.com/gpu" not in resources["requests"], target
            assert not pod.get("tolerations") and not pod.get("nodeSelector")
            assert resources["requests"]["ephemeral-storage"] == "10000M"  # default-resources disk_mb

    # The secret holds the keys (base64, as Kubernetes stores them).
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded["snakemake_storage_s3_secret_key"] == s3.secret_key
    # ... and no pod wrote them: not in its log (what `kubectl logs` shows anyone who may
    # read the namespace's logs), nor in its files. (This run's own terminal does show
    # them: the test passes them as --storage-s3-* flags, docs/reliability.md.)
    scanned = assert_no_secrets(
        api.root / "pods", secrets={"s3 access key": s3.access_key, "s3 secret key": s3.secret_key}
    )
    assert sum(p.name == "container.log" for p in scanned) == len(api.job_specs)

    # Clean-up: every Job deleted after it finished, the secret at the end, nothing left running.
    assert deleted_jobs(api) == {spec["metadata"]["name"] for spec in api.job_specs}
    assert ("DELETE", f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret_name}") in {
        (m, p) for m, p, _, code in api.requests if code == 200
    }
    assert api.running_jobs() == [] and api.unhandled == []
    # Each pod's `pip install --target ... snakemake-storage-plugin-s3` met the shim.
    calls = (api.root / "pip-calls.log").read_text().splitlines()
    assert len(calls) == len(api.job_specs) and all("snakemake-storage-plugin-s3" in c for c in calls)


# Summarisation and training of one data set, a retrieval evaluation (whose corpus goes
# through split, embed, merge and verify) and a training sweep, tiny: what `snakemake
# --profile eks` runs by default for every task.
EVERY_TASK_TRAIN = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "batch_size": 4, "max_iters": 10,
                    "eval_interval": 10, "eval_windows": 8, "checkpoint_interval": 10, "warmup_iters": 2,
                    "lr_decay_iters": 10, "sample_tokens": 8, "dtype": "float32"}
# Outputs that hold wall-clock times (per step, per second): never the same bytes twice.
TIMED = {"losses.parquet", "metrics.json"}


def beir_folder(folder, corpus_file):
    """A tiny BEIR folder from the cluster corpus: its documents, and 3 queries that
    repeat a document's text (each judged against that document)."""
    docs = [json.loads(line) for line in corpus_file.read_text().splitlines()]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d["id"], "text": d["text"]}) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": docs[i]["text"]}) + "\n" for i in range(3)))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\t{docs[i]['id']}\t1\n" for i in range(3)))
    return folder


def every_task_config(path, corpus: str, beir: str):
    config = {
        "dataset": "every", "tasks": ["summarisation", "training"], "n_chunks": 1,
        "input": {"path": corpus}, "retrieval": {"path": beir, "name": "beir", "n_chunks": 1},
        "resources": {"embed": {"threads": 1, "mem_mb": 1000}, "embed_queries": {"threads": 1}},
        "shards": {"tokens_per_shard": 4000}, "train": EVERY_TASK_TRAIN,
        # ROUGE against the document itself: what matters here is that the evaluation
        # reads the corpus (through storage) and the split's rejects in a pod
        "summarise": {"reference_field": "text"},
        "sweeps": {"lr": {"stage": "train", "grid": {"train.lr": [3.0e-3]}, "seeds": [0],
                          "metrics": {"best_val_loss": "min"}}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_every_task_and_a_sweep_run_on_eks_and_record_what_a_local_run_records(
    api, s3, s3_prefix, s3_corpus, corpus_file, tmp_path, sm
):
    """The default target (all: lead summaries scored with ROUGE, shards and a GPT, the
    retrieval evaluation of a BEIR folder in the bucket with its corpus embedded, a
    sweep's table, the landing page, provenance) through the eks profile, each job in a
    pod of its own, and the same config run locally. A pod gets only the files its job
    declares. Before this test, that run stopped: two rules ambiguous in
    storage (a wildcard constraint lost), the tokenizer's vocabulary, the shard
    sidecars and the shard files undeclared, the train job writing beside its outputs,
    landing reading the files by their names instead of their copies, provenance unable
    to hash a folder, a folder uploaded by a pod taken for missing. Provenance must name
    the same outputs with the same bytes as the local run's, and no record may name a
    file by its local copy. The report made with the profile opens on the landing page,
    fetched from the bucket."""
    beir = beir_folder(tmp_path / "beir", corpus_file)
    for file in sorted(p for p in beir.rglob("*") if p.is_file()):
        s3.client().put_object(Bucket=s3.bucket, Key=f"corpora/beir/{file.relative_to(beir)}", Body=file.read_bytes())
    checkout = sm.checkout(tmp_path / "checkout")
    config = every_task_config(checkout / "every.yaml", s3_corpus, f"s3://{s3.bucket}/corpora/beir")
    # The local run of the same config goes on beside the EKS run (they share no file):
    # the EKS run, mostly pods starting and waiting on one another, leaves room for it.
    local = tmp_path / "local"
    local.mkdir()
    local_run = sm.start(local, "-s", str(sm.REPO / "Snakefile"), "--cores", "2", "--configfile",
                         str(every_task_config(local / "every.yaml", str(corpus_file), str(beir))), timeout_s=400)
    run = run_eks(api, s3, s3_prefix, checkout, sm, "--configfile", config.name, timeout_s=400)
    reference = local_run.finish()
    assert run.returncode == 0, sm.describe(run)
    assert reference.returncode == 0, sm.describe(reference)

    objects = s3.objects(f"{s3_prefix}/")
    for ds in ("every", "beir"):
        got = json.loads(objects[f"{s3_prefix}/results/{ds}/provenance.json"])
        want = json.loads((local / f"results/{ds}/provenance.json").read_text())
        assert got["outputs"].keys() == want["outputs"].keys() and got["timings"].keys() == want["timings"].keys()
        untimed = [k for k in want["outputs"] if k.rsplit("/", 1)[1] not in TIMED]
        assert {k: got["outputs"][k] for k in untimed} == {k: want["outputs"][k] for k in untimed}
        # the sources by their URLs, the same bytes
        local_names = {str(corpus_file): s3_corpus} | {
            str(p): f"s3://{s3.bucket}/corpora/beir/{p.relative_to(beir)}" for p in beir.rglob("*") if p.is_file()}
        assert got["inputs"] == {local_names.get(k, k): v for k, v in want["inputs"].items()}
    every = json.loads(objects[f"{s3_prefix}/results/every/provenance.json"])
    assert [k for k in every["outputs"] if k.startswith("results/every/shards/train_")]  # the folder, file by file
    metrics = json.loads(objects[f"{s3_prefix}/results/beir/retrieval/metrics.json"])
    assert metrics == json.loads((local / "results/beir/retrieval/metrics.json").read_text())
    named_by_copy = [key for key, body in objects.items() if "/results/" in key
                     and key.endswith((".json", ".jsonl", ".rst")) and b".snakemake/storage" in body]
    assert named_by_copy == []  # shardflow.core.s3.logical_path
    landing = objects[f"{s3_prefix}/results/report.rst"].decode()
    assert all(f"{title}: every" in landing for title in ("Summarisation", "Training"))
    assert "Retrieval evaluation: beir" in landing
    assert f"{s3_prefix}/results/sweeps/lr/lr=0.003/seed=0/train/hf/model.safetensors" in objects
    assert f"{s3_prefix}/results/sweeps/lr/summary.parquet" in objects
    # The uploaded sources were removed at the end; the sentinel kept the bucket.
    assert not [k for k in objects if "snakemake-workflow-sources" in k]

    # The report's first page is the landing page, fetched from the bucket at parse time.
    assert not (checkout / "results").exists()
    made = run_eks(api, s3, s3_prefix, checkout, sm, "--configfile", config.name, "--report", "report.html")
    assert made.returncode == 0, sm.describe(made)
    html = (checkout / "report.html").read_text()
    assert "Retrieval evaluation: beir" in html and "Training: every" in html, html[-3000:]

    rules = {target.split(":")[0] for target in specs_by_target(api)}
    assert {"split_every", "split_beir", "embed", "embed_queries", "summarise", "evaluate_summaries",
            "train_tokenizer", "tokenize", "gather_shards", "train", "sweep_train", "retrieval_evaluate",
            "landing", "provenance"} <= rules, rules
    gpu_rules = {"embed", "embed_queries", "train", "sweep_train", "retrieval_evaluate"}
    check_job_specs(api, s3, gpu_rules=gpu_rules, memory={"embed": "1000M"})
    embed = specs_by_target(api)["embed:dataset=beir,chunk=0"][0]
    assert embed["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "950m"  # 1 x 0.95


def test_eks_dry_run_as_typed_from_the_repo_root_needs_only_environment_variables(s3, sm):
    """`snakemake --profile eks -n`, exactly as typed in the repository root (./eks links
    to profiles/eks after `make setup`), against the test S3 server. The storage plugin
    (0.3.6) hands boto3 endpoint_url=None and no keys when none are configured, so the
    standard AWS variables point it at any S3 server; the profile's site values come from
    SHARDFLOW_*. No cluster, no kubeconfig, no --storage-s3-* flags (profiles/README.md)."""
    assert not os.path.exists("/models/in-the-image")
    assert (sm.REPO / "eks").resolve() == (sm.REPO / "profiles" / "eks").resolve(), (
        "./eks does not link to profiles/eks: `make setup` makes the link (`make test` runs it first)"
    )
    prefix = "tests/eks-dry-run"
    env = sm.env(
        **s3.aws_env(),
        SHARDFLOW_S3_BUCKET=s3.bucket,
        SHARDFLOW_S3_PREFIX=prefix,
        SHARDFLOW_IMAGE=IMAGE,
    )
    # A model folder that only the image holds is not looked for on the controller.
    cmd = ["timeout", "-k", "10", "120", "snakemake", "--profile", "eks", "-n",
           "--config", "embedding={model: /models/in-the-image}"]
    proc = subprocess.run(cmd, cwd=sm.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "Using profile eks for setting default command line arguments." in proc.stdout
    counts = job_counts(proc.stdout)
    assert counts["embed"] == 4 and counts["split_demo"] == counts["merge"] == counts["verify"] == 1, counts
    # It looked in the bucket under the profile's prefix, and found nothing there.
    assert f"s3://{s3.bucket}/{prefix}/results/demo/embed/embed_0.npy (in storage)" in proc.stdout
    # Each embed job carries the GPU request the pods will make.
    embed_resources = re.findall(r"rule embed:.*?resources: ([^\n]*)", proc.stdout, flags=re.DOTALL)
    assert len(embed_resources) == 4
    for line in embed_resources:
        assert {"gpu=1", "gpu_manufacturer=nvidia", "scale=0"} <= set(line.split(", ")), line
    assert not s3.objects(f"{prefix}/")  # a dry run writes nothing


def test_gpu_request_without_an_equal_limit_is_refused_by_the_api_server(
    api, s3, s3_prefix, workflow_dir, sm
):
    # profiles/eks with `scale: 1` for embed: the plugin then sets requests only, and
    # a real API server refuses the Job. The run stops at once.
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--set-resources", "embed:scale=1", timeout_s=120)
    assert run.returncode == 1, sm.describe(run)
    assert "(422)" in run.output, sm.describe(run)
    assert "Limit must be set for non overcommitable resources" in run.output, sm.describe(run)
    rejected = api.job_specs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert rejected["requests"]["nvidia.com/gpu"] == "1" and not rejected.get("limits")
    assert not list((api.root / "pods").iterdir())  # nothing ran


def test_a_failed_job_aborts_the_whole_run_on_a_real_api_server(api, s3, s3_prefix, workflow_dir, sm):
    """Finding: when a job's pod fails, plugin 0.5.1 reads the pod log with previous=true;
    a real API server answers 400 (the container never restarted), the plugin raises, and
    Snakemake stops the whole run: no retry of the job (profile `retries: 2`), no
    keep-going, the failed Job and its pod are left in the namespace."""
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", "fail_chunk=b")
    assert not run.timed_out, sm.describe(run)
    assert run.returncode == 1, sm.describe(run)
    assert "Kubernetes request failed" in run.output and "(400)" in run.output, sm.describe(run)
    assert 'previous terminated container \\"snakemake\\"' in run.output, sm.describe(run)
    assert any(p.endswith("/log") and q.get("previous", "").lower() == "true" and code == 400
               for _, p, q, code in api.requests)

    (failed,) = specs_by_target(api)["embed:chunk=b"]  # submitted once: no retry
    name = failed["metadata"]["name"]
    assert "Trying to restart" not in run.output  # the controller never saw a job error
    # Inside the pod, the job-mode Snakemake did retry (the rule's `retries: 2`) before exiting 1.
    assert pod_log(api, name).count("Trying to restart job") == 2
    assert name not in deleted_jobs(api)  # left behind for `kubectl delete job`
    assert api.running_jobs() == []


def test_rule_retries_inside_the_pod_absorb_a_transient_failure(
    api, s3, s3_prefix, workflow_dir, sm
):
    """The guard: a rule-level `retries:` reaches the job-mode Snakemake inside the pod
    (a profile/CLI --retries does not: pods get --retries 0), so a transient failure is
    retried in place and the pod exits 0 -- the plugin never reads a previous log."""
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", "fail_chunk=b", "fail_times=1")
    assert run.returncode == 0, sm.describe(run)
    objects = s3.objects(f"{s3_prefix}/")
    assert all(f"{s3_prefix}/{rel}" in objects for rel in sm.OUTPUTS)
    assert json.loads(objects[f"{s3_prefix}/embeddings/b.json"])["chunk"] == "b"
    assert json.loads(objects[f"{s3_prefix}/merged/summary.json"])["chunks"] == ["a", "b", "c"]
    (job,) = specs_by_target(api)["embed:chunk=b"]
    assert pod_log(api, job["metadata"]["name"]).count("Trying to restart job") == 1
    assert not [q for _, p, q, _ in api.requests if p.endswith("/log")]  # no log read at all


@pytest.mark.parametrize("api", [False], indirect=True, ids=["lenient"])
def test_lenient_api_server_lets_the_plugin_report_and_retry_the_failure(api, s3, s3_prefix, workflow_dir, sm):
    """Control for the finding above: where previous=true is answered (this stand-in when
    not strict), the plugin reports the failed job, Snakemake resubmits it, runs the other
    jobs on and ends with an error -- so it is the 400 alone that aborts real runs."""
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", "fail_chunk=b", "embed_retries=1")
    assert not run.timed_out, sm.describe(run)
    assert run.returncode == 1, sm.describe(run)
    assert "(400)" not in run.output
    assert "Trying to restart job" in run.output, sm.describe(run)
    failed = specs_by_target(api)["embed:chunk=b"]
    assert len(failed) == 2  # first attempt + 1 retry, each a new Job
    assert {s["metadata"]["name"] for s in failed} <= deleted_jobs(api)
    objects = s3.objects(f"{s3_prefix}/")
    assert f"{s3_prefix}/embeddings/a.json" in objects and f"{s3_prefix}/embeddings/c.json" in objects
    assert f"{s3_prefix}/merged/summary.json" not in objects


def test_pod_killed_like_out_of_memory_stops_the_run_clearly_and_a_rerun_completes(
    api, s3, s3_prefix, workflow_dir, tiny_local, sm
):
    """Fault: the stand-in SIGKILLs the first embed pod while its job runs and reports
    what an out-of-memory kill looks like (pod Failed, container exit code 137, reason
    OOMKilled). Plugin 0.5.1 reacts as to any failed pod: it asks for the log with
    previous=true, the API server refuses (400), and the run stops with "Kubernetes
    request failed" (the exit code and reason are never shown). The killed job left
    nothing in the bucket. The other embed Jobs are left running (their pods go on and
    upload after Snakemake has exited) but their outputs stay marked incomplete, so
    after deleting the leftover Jobs (profiles/README.md) a plain rerun redoes every job
    that was running and every output equals an uninterrupted local run's."""
    # Two chunks (one pod killed, one left running), each job still running when the pod dies.
    config = ("chunks=[a,b]", "embed_seconds=1")
    reference = tiny_local(*config)
    api.fail_next_pod("embed", when_log_has="rule embed:")
    first = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", *config, timeout_s=120)
    assert not first.timed_out, sm.describe(first)
    assert first.returncode == 1, sm.describe(first)
    assert "Kubernetes request failed" in first.output and "(400)" in first.output, sm.describe(first)
    ((killed, _),) = api.faults_injected
    (pod,) = api.list_pods(NAMESPACE, f"job-name={killed}")[1]["items"]
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], terminated["exitCode"], terminated["reason"]) == ("Failed", 137, "OOMKilled")
    assert "OOMKilled" not in first.output  # never reported
    chunk = target_of(json.loads((api.root / "jobs" / f"{killed}.json").read_text())).split("chunk=")[1]
    assert f"{s3_prefix}/embeddings/{chunk}.json" not in s3.objects(f"{s3_prefix}/")

    # Snakemake marked the outputs of every job it had started incomplete, the leftover
    # Jobs' included: the rerun (rerun-incomplete: true in the profile) redoes them all,
    # whatever those pods upload after the abort. Delete the leftover Jobs first
    # (`kubectl -n shardflow delete jobs -l app=snakemake`): the plugin deleted none.
    assert not deleted_jobs(api)
    leftover = [target_of(x).split("chunk=")[1] for x in api.job_specs if x["metadata"]["name"] in api.running_jobs()]
    owed = [c for c in "ab" if marked_incomplete(workflow_dir, f"s3://{s3.bucket}/{s3_prefix}/embeddings/{c}.json")]
    assert {chunk, *leftover} <= set(owed), (chunk, leftover, owed)
    delete_jobs(api, [spec["metadata"]["name"] for spec in api.job_specs])
    assert api.running_jobs() == []
    after_fault = s3.objects(f"{s3_prefix}/")
    for rel in reference:  # whatever landed is whole
        if f"{s3_prefix}/{rel}" in after_fault:
            assert sm.sha256(after_fault[f"{s3_prefix}/{rel}"]) == reference[rel], rel

    submitted_before = len(api.job_specs)
    rerun = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", *config, timeout_s=120)
    assert rerun.returncode == 0, sm.describe(rerun)
    assert sorted(target_of(x) for x in api.job_specs[submitted_before:]) == [
        *(f"embed:chunk={c}" for c in owed), "merge:"]
    objects = s3.objects(f"{s3_prefix}/")
    assert {rel: sm.sha256(objects[f"{s3_prefix}/{rel}"]) for rel in reference} == reference
    assert sorted(reference) == ["embeddings/a.json", "embeddings/b.json", "merged/summary.json"]
    assert api.faults_injected == [(killed, "embed")]  # one pod failed, on purpose
    print(f"Kubernetes pod of embed:chunk={chunk} killed (137, OOMKilled): run stopped after {first.seconds:.0f} s "
          f"with embed Jobs {leftover} still running; rerun ran embed {owed} + merge in {rerun.seconds:.0f} s")


def test_standin_deleting_a_job_stops_its_whole_process_group(api):
    """The stand-in itself: a deleted Job leaves no process behind, even one that ignores
    SIGTERM under a shell (as the job-mode Snakemake does while a job runs)."""
    import os
    import time

    import kubernetes

    client = kubernetes.config.new_client_from_config(str(api.kubeconfig_path))
    batch, core = kubernetes.client.BatchV1Api(client), kubernetes.client.CoreV1Api(client)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    job = {
        "metadata": {"name": "stubborn"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "snakemake", "image": "x", "command": ["/bin/sh"],
            "args": ["-c", f"python -c '{stubborn}' && true"]}]}}},
    }
    batch.create_namespaced_job(NAMESPACE, job)
    (pod,) = core.list_namespaced_pod(NAMESPACE, label_selector="job-name=stubborn").items
    assert pod.status.container_statuses[0].state.running is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "signal.SIG_IGN" not in _process_cmdlines():
        time.sleep(0.1)
    assert "signal.SIG_IGN" in _process_cmdlines()

    batch.delete_namespaced_job("stubborn", NAMESPACE, propagation_policy="Foreground")
    assert "signal.SIG_IGN" not in _process_cmdlines()
    assert api.running_jobs() == []
    with pytest.raises(kubernetes.client.rest.ApiException) as gone:
        batch.read_namespaced_job_status("stubborn", NAMESPACE)
    assert gone.value.status == 404
    assert os.path.exists(api.root / "jobs" / "stubborn.json")  # the spec stays recorded


def _process_cmdlines() -> str:
    from pathlib import Path

    out = []
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(f.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(out)


def test_standin_fails_the_next_pod_of_a_rule_like_an_out_of_memory_kill(api):
    """The stand-in's fault knob itself: one pod of the named rule is SIGKILLed once its
    log shows the marker and reports exit code 137, OOMKilled; the rule's next pod and
    other rules' pods run normally."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(str(api.kubeconfig_path))
    batch, core = kubernetes.client.BatchV1Api(client), kubernetes.client.CoreV1Api(client)

    def submit(name, rule):
        script = f"echo 'rule {rule}:'; sleep 0.5; exit 0 # --target-jobs '{rule}:chunk=a'"
        batch.create_namespaced_job(NAMESPACE, {
            "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "snakemake", "image": "x", "command": ["/bin/sh"], "args": ["-c", script]}]}}},
        })

    def final_state(name):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            (pod,) = core.list_namespaced_pod(NAMESPACE, label_selector=f"job-name={name}").items
            if pod.status.phase != "Running":
                term = pod.status.container_statuses[0].state.terminated
                return pod.status.phase, term.exit_code, term.reason
            time.sleep(0.1)
        raise AssertionError(f"{name} still running")

    api.fail_next_pod("embed", when_log_has="rule embed:")
    submit("merge-1", "merge")
    submit("embed-1", "embed")
    submit("embed-2", "embed")
    assert final_state("merge-1") == ("Succeeded", 0, "Completed")
    assert final_state("embed-1") == ("Failed", 137, "OOMKilled")
    assert final_state("embed-2") == ("Succeeded", 0, "Completed")
    assert batch.read_namespaced_job_status("embed-1", NAMESPACE).status.failed == 1
    assert api.faults_injected == [("embed-1", "embed")]
