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


def queries_file(path, corpus_file):
    """Queries for task search: two documents' texts and a question, as a user's CSV."""
    docs = [json.loads(line) for line in corpus_file.read_text().splitlines()]
    rows = [("own-0", " ".join(docs[0]["text"].split())), ("own-1", " ".join(docs[1]["text"].split())),
            ("question", "how are the records kept")]
    path.write_text("qid,question\n" + "".join(f'{qid},"{text.replace(chr(34), chr(34) * 2)}"\n' for qid, text in rows))
    return path


def every_task_config(path, corpus: str, beir: str, queries: str):
    config = {
        "dataset": "every", "tasks": ["embedding", "neighbours", "search", "summarisation", "training"],
        "n_chunks": 1, "input": {"path": corpus}, "retrieval": {"path": beir, "name": "beir", "n_chunks": 1},
        "search": {"queries": queries, "id_field": "qid", "text_field": "question", "k": 3},
        "resources": {"embed": {"threads": 1, "mem_mb": 1000}, "embed_queries": {"threads": 1},
                      "neighbours": {"threads": 1}, "embed_search_queries": {"threads": 1}, "search": {"threads": 1}},
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
    """The default target (all: the corpus embedded and its neighbours and near-duplicates,
    a CSV of queries in the bucket searched against it, lead summaries scored with ROUGE, shards and a GPT, the
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
    queries = queries_file(tmp_path / "questions.csv", corpus_file)
    s3.client().put_object(Bucket=s3.bucket, Key="corpora/questions.csv", Body=queries.read_bytes())
    s3_queries = f"s3://{s3.bucket}/corpora/questions.csv"
    checkout = sm.checkout(tmp_path / "checkout")
    config = every_task_config(checkout / "every.yaml", s3_corpus, f"s3://{s3.bucket}/corpora/beir", s3_queries)
    # The local run of the same config goes on beside the EKS run (they share no file):
    # the EKS run, mostly pods starting and waiting on one another, leaves room for it.
    local = tmp_path / "local"
    local.mkdir()
    local_run = sm.start(local, "-s", str(sm.REPO / "Snakefile"), "--cores", "2", "--configfile",
                         str(every_task_config(local / "every.yaml", str(corpus_file), str(beir), str(queries))),
                         timeout_s=400)
    try:
        run = run_eks(api, s3, s3_prefix, checkout, sm, "--configfile", config.name, timeout_s=400)
    finally:  # never left running into the next test
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
        local_names = {str(corpus_file): s3_corpus, str(queries): s3_queries} | {
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
    assert all(f"{title}: every" in landing for title in ("Summarisation", "Training", "Neighbours", "Search"))
    hits = objects[f"{s3_prefix}/results/every/search/hits.parquet"]
    assert hits == (local / "results/every/search/hits.parquet").read_bytes()
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
            "neighbours", "merge_neighbours", "search_queries", "embed_search_queries", "search", "landing",
            "provenance"} <= rules, rules
    gpu_rules = {"embed", "embed_queries", "train", "sweep_train", "retrieval_evaluate", "neighbours",
                 "embed_search_queries", "search"}
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


def log_reads(api) -> list[tuple[str, str, int]]:
    """(pod, previous, HTTP status) of each pod log read, in order."""
    return [(p.split("/")[-2], q.get("previous", "").lower(), code) for _, p, q, code in api.requests
            if p.endswith("/log")]


def test_a_failed_pod_is_resubmitted_and_the_other_jobs_run_on(api, s3, s3_prefix, workflow_dir, sm):
    """Plugin 0.5.1 reads a failed pod's log with previous=true; a real API server (the
    stand-in in strict mode) answers 400, as the container never restarted, and that
    stopped the whole run. With the read falling back to the container's log
    (shardflow.core.kube, as rules/common.smk calls it), the failure is a failed job:
    its log is saved, its Job deleted, the job resubmitted in a new pod (`retries`), the
    other jobs run on (keep-going), and the run ends with an error once they are done."""
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", "chunks=[a,b]", "fail_chunk=b", "embed_retries=1")
    assert not run.timed_out, sm.describe(run)
    assert run.returncode == 1, sm.describe(run)
    assert "Kubernetes request failed" not in run.output and "Trying to restart job" in run.output, sm.describe(run)
    failed = specs_by_target(api)["embed:chunk=b"]
    assert len(failed) == 2  # the first attempt and one resubmission, each a Job of its own
    names = [spec["metadata"]["name"] for spec in failed]
    assert set(names) <= deleted_jobs(api)
    reads = log_reads(api)
    for name in names:  # refused as a real API server does, then read as the container is
        pod = next(p for p, _, _ in reads if p.startswith(f"{name}-"))
        assert [(prev, code) for p, prev, code in reads if p == pod] == [("true", 400), ("false", 200)]
        saved = workflow_dir / ".snakemake" / "auxiliary" / "kubernetes-logs" / f"{name}.log"
        assert "configured to fail (fail_chunk)" in saved.read_text()
    objects = s3.objects(f"{s3_prefix}/")
    assert f"{s3_prefix}/embeddings/a.json" in objects  # the other chunk ran on
    assert f"{s3_prefix}/merged/summary.json" not in objects
    assert api.running_jobs() == []


def test_rule_retries_inside_the_pod_absorb_a_transient_failure(
    api, s3, s3_prefix, workflow_dir, sm
):
    """The guard: a rule-level `retries:` reaches the job-mode Snakemake inside the pod
    (a profile/CLI --retries does not: pods get --retries 0), so a transient failure is
    retried in place and the pod exits 0 -- the plugin never reads a previous log."""
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", "chunks=[a,b]", "fail_chunk=b", "fail_times=1")
    assert run.returncode == 0, sm.describe(run)
    objects = s3.objects(f"{s3_prefix}/")
    assert all(f"{s3_prefix}/{rel}" in objects for rel in sm.OUTPUTS if "/c." not in rel)
    assert json.loads(objects[f"{s3_prefix}/embeddings/b.json"])["chunk"] == "b"
    assert json.loads(objects[f"{s3_prefix}/merged/summary.json"])["chunks"] == ["a", "b"]
    (job,) = specs_by_target(api)["embed:chunk=b"]
    assert pod_log(api, job["metadata"]["name"]).count("Trying to restart job") == 1
    assert not [q for _, p, q, _ in api.requests if p.endswith("/log")]  # no log read at all


def test_pod_killed_like_out_of_memory_is_resubmitted_and_the_run_completes(
    api, s3, s3_prefix, workflow_dir, tiny_local, sm
):
    """Fault: the stand-in SIGKILLs the first embed pod while its job runs and reports
    what an out-of-memory kill looks like (pod Failed, container exit code 137, reason
    OOMKilled). The plugin reports it as a failed job (its log read falling back as
    above), Snakemake resubmits the job in a new pod with the next attempt's memory,
    the other job runs on, and the run completes with every output equal to an
    uninterrupted local run's: a spot node taken back mid-job costs that job's time."""
    config = ("chunks=[a,b]", "embed_seconds=1")
    reference = tiny_local(*config)
    api.fail_next_pod("embed", when_log_has="rule embed:")
    run = run_eks(api, s3, s3_prefix, workflow_dir, sm, "--config", *config, timeout_s=120)
    assert not run.timed_out, sm.describe(run)
    assert run.returncode == 0, sm.describe(run)
    ((killed, _),) = api.faults_injected  # the pod's status: test_standin_fails_the_next_pod_...
    target = target_of(json.loads((api.root / "jobs" / f"{killed}.json").read_text()))
    first, again = specs_by_target(api)[target]
    assert first["metadata"]["name"] == killed and killed in deleted_jobs(api)
    memory = [s["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] for s in (first, again)]
    assert memory == ["200M", "300M"], memory  # the next attempt's memory
    objects = s3.objects(f"{s3_prefix}/")
    assert {rel: sm.sha256(objects[f"{s3_prefix}/{rel}"]) for rel in reference} == reference
    assert sorted(reference) == ["embeddings/a.json", "embeddings/b.json", "merged/summary.json"]
    assert api.running_jobs() == []
    print(f"Kubernetes pod of {target} killed (137, OOMKilled): resubmitted, run completed in {run.seconds:.0f} s")


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
