import re
from types import SimpleNamespace

import pytest

from shardflow.workflow import site
from shardflow.workflow.site import missing, site_env, unexpanded, unexpanded_message


def test_site_env_returns_the_values_when_all_are_set():
    env = {"A": "bucket", "B": "img"}
    assert site_env("eks", "A", "B", environ=env) == env


def test_site_env_names_every_unset_or_empty_variable_in_one_line():
    with pytest.raises(SystemExit) as exc:
        site_env("eks", "A", "B", "C", environ={"B": "x", "C": ""})
    assert str(exc.value) == "profile eks: set the environment variables A, C (profiles/README.md, 'eks')"
    assert missing(["A", "B"], {"B": "x"}) == ["A"]


def test_unexpanded_finds_literal_variables_whose_value_is_unset():
    settings = {
        "default-storage-prefix": "s3://$BUCKET/${PREFIX}/x",
        "default-resources slurm_account": "$ACCOUNT",
        "default-resources mem_mb": 4000,
        "default-resources tmpdir": None,
        "set": "$SET",
    }
    found = unexpanded(settings, environ={"SET": "value", "PREFIX": "p"})
    assert found == {"default-storage-prefix": ["BUCKET"], "default-resources slurm_account": ["ACCOUNT"]}
    assert unexpanded_message(found) == (
        "unset environment variables BUCKET, ACCOUNT in the profile "
        "(default-storage-prefix uses $BUCKET; default-resources slurm_account uses $ACCOUNT)"
    )
    assert unexpanded({"x": "a$ literal dollar"}, environ={}) == {}


class _Resource:  # Snakemake's parsed form keeps the value as given in `raw`
    def __init__(self, raw):
        self.raw = raw


class _Resources(dict):  # a job's resources, as the plugins read them
    __getattr__ = dict.__getitem__


def test_gpu_requests_name_what_the_executor_plugins_ask_for_whatever_the_jobs_gpu_says():
    """A gpu_model, a gres naming gpu or a `gpu` above 0 asks sbatch for a GPU for a job
    without a `gpu` resource (a GPU rule's job on the CPU; train's there have gpu 0); a
    `gpus` or `nvidia_gpu` asks the job step's srun, where the job has no count read
    before it. What gpu_requests says sbatch and srun get is checked against the
    installed plugins' own (snakemake-executor-plugin-slurm 2.8, utils.set_gres_string;
    -slurm-jobstep 0.6.1, get_gpu_setting)."""
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")
    jobstep = pytest.importorskip("snakemake_executor_plugin_slurm_jobstep")

    given = {
        "summarise": {"gpu_model": _Resource("a100"), "slurm_partition": "gpu", "mem_mb": 2000},
        "sweep_summarise": {"gres": "gpu:1"},
        "merge_summaries": {"gpu_model": "a100"},  # not among the rules asked about
        "embed": {"gres": "tmp:10G", "slurm_partition": "gpu"},
        "train": {"gpu_model": "h100", "slurm_extra": "'--exclude=node17'"},
        "embed_queries": {"gpu": _Resource(2)},
        "retrieval_evaluate": {"gpus": 1},
        "sweep_embed": {"nvidia_gpu": 1},
        "sweep_train": {"nvidia_gpu": 2},  # the job step reads the job's gpu 0 first
        "sweep_embed_chunk": {"gpu": 0, "gpus": 0},
        "sweep_embed_queries": {"gpu_model": "a100", "gpu": 2},
    }
    gpu = {"train": 0, "sweep_train": 0}
    rules = [rule for rule in given if rule != "merge_summaries"]
    found = site.gpu_requests(given, rules, gpu)
    both = "the SLURM plugin asks sbatch for --gpus={} and the Kubernetes plugin requests 2 GPUs for its pod"
    step = "the SLURM plugin's job step runs it with srun --gpus=1 (sbatch gets no GPU from {})"
    assert found == [
        ("summarise", "gpu_model", "a100", "the SLURM plugin asks sbatch for --gpus=a100:1"),
        ("sweep_summarise", "gres", "gpu:1", "the SLURM plugin asks sbatch for --gres=gpu:1"),
        ("train", "gpu_model", "h100", "the SLURM plugin asks sbatch for --gpus=h100:0"),
        ("embed_queries", "gpu", 2, both.format(2)),
        ("retrieval_evaluate", "gpus", 1, step.format("gpus")),
        ("sweep_embed", "nvidia_gpu", 1, step.format("nvidia_gpu")),
        ("sweep_embed_queries", "gpu_model", "a100", "the SLURM plugin asks sbatch for --gpus=a100:2"),
        ("sweep_embed_queries", "gpu", 2, both.format("a100:2")),
    ]

    def job(rule):
        values = {name: getattr(v, "raw", v) for name, v in given[rule].items()}
        return SimpleNamespace(resources=_Resources({**({"gpu": gpu[rule]} if rule in gpu else {}), **values}))

    for rule in rules:
        asks = " ".join(a for r, _, _, a in found if r == rule)
        sbatch = [option for option in utils.set_gres_string(job(rule)).split() if "gpu" in option]
        srun = jobstep.get_gpu_setting(job(rule))
        assert set(re.findall(r"sbatch for (\S+)", asks)) == set(sbatch), rule
        assert re.findall(r"srun (--gpus=\d+)", asks) == ([srun] if srun and not sbatch else []), rule
    assert "--gres=tmp:10G" in utils.set_gres_string(job("embed"))  # another gres asks for no GPU
    assert not utils.set_gres_string(job("sweep_train")) and not jobstep.get_gpu_setting(job("sweep_train"))


def test_the_kubernetes_plugin_asks_for_gpus_by_the_gpu_resource_alone():
    """gpu_asks has the Kubernetes plugin (0.5.1) turn `gpu` alone into a GPU request for
    the pod: its job submission reads no other GPU count (nor gpu_model or gres)."""
    kubernetes = pytest.importorskip("snakemake_executor_plugin_kubernetes")
    import inspect

    source = inspect.getsource(kubernetes.Executor.run_job)
    assert '"gpu" in resources_dict' in source and "nvidia.com/gpu" in source
    for name in ("gpus", "nvidia_gpu", "gpu_model", "gres"):
        assert f'"{name}"' not in source and f"'{name}'" not in source, name


def test_gpu_request_warnings_name_the_rule_the_value_and_what_to_change():
    on_cpu = {"embed": "gpu_jobs.device cpu", "train": "gpu_jobs.device cpu", "summarise": "summarise.method lead"}
    given = {
        "embed": {"gpu": _Resource(1), "machine_type": "g5.xlarge"},
        "train": {"gpu": 0},
        "summarise": {"gpus": 1},
        "merge": {"gpu": 1},
    }
    assert site.gpu_request_warnings(given, on_cpu, {"train": 0}) == [
        "set-resources embed:gpu=1: the SLURM plugin asks sbatch for --gpus=1 and the Kubernetes plugin requests "
        "1 GPU for its pod for each embed job, which runs on the CPU (gpu_jobs.device cpu) and uses no GPU; leave it "
        "out of the profile for this run (profiles/README.md, slurm, eks)",
        "set-resources summarise:gpus=1: the SLURM plugin's job step runs it with srun --gpus=1 (sbatch gets no GPU "
        "from gpus) for each summarise job, which runs on the CPU (summarise.method lead) and uses no GPU; leave it "
        "out of the profile for this run (profiles/README.md, slurm)",
    ]


def test_gpu_request_warnings_name_a_gpu_given_to_a_rule_that_is_no_gpu_rule():
    """A CPU rule's jobs never use a GPU, whatever the run: a gpu_model, gres or gpu that
    set-resources gives one is named as for a GPU rule on the CPU, after those."""
    given = {
        "merge": {"gpu_model": "a100", "slurm_partition": "gpu"},
        "split_news": {"gres": "gpu:1"},
        "verify": {"gpu": 1},
        "report": {"slurm_partition": "gpu", "gpu": 0},  # a partition: no GPU asked for
        "embed": {"gpu_model": "a100"},
        "sweep_embed_chunk": {"gpu_model": "a100"},  # a GPU rule whose jobs get their GPU
    }
    lines = site.gpu_request_warnings(
        given, {"embed": "gpu_jobs.device cpu"}, cpu_rules=["split_news", "merge", "verify", "report"]
    )
    assert [line.removeprefix("set-resources ").split(" for each")[0] for line in lines] == [
        "embed:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:1",
        "split_news:gres=gpu:1: the SLURM plugin asks sbatch for --gres=gpu:1",
        "merge:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:1",
        "verify:gpu=1: the SLURM plugin asks sbatch for --gpus=1 and the Kubernetes plugin requests 1 GPU for its pod",
    ]
    assert lines[2].endswith(
        "for each merge job, which runs on the CPU (not a GPU rule) and uses no GPU; take it out of the profile "
        "(profiles/README.md, slurm)"
    )


def test_the_workflows_python_goes_first_on_path_where_it_has_one(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").touch()
    env = {"PATH": "/usr/bin:/bin"}
    assert site.python_first_on_path(env, str(venv / "python3.11"))
    assert env["PATH"] == f"{venv}:/usr/bin:/bin"
    assert not site.python_first_on_path(env, str(venv / "python3.11"))  # already first: once
    bare = tmp_path / "bare"
    bare.mkdir()
    env = {"PATH": "/usr/bin"}
    assert not site.python_first_on_path(env, str(bare / "python3")) and env["PATH"] == "/usr/bin"


@pytest.mark.parametrize(
    ("argv", "no_jobs", "report"),
    [
        (["snakemake", "-n", "--cores", "2"], False, False),
        (["snakemake", "--profile", "eks", "--report", "r.html"], True, True),
        (["snakemake", "--report=r.html"], True, True),
        (["snakemake", "--unlock"], True, False),
        (["snakemake", "-t", "--configfile", "c.yaml"], True, False),
        (["snakemake", "--dag"], True, False),
        (["snakemake", "results/report.rst"], False, False),  # a target is no flag
    ],
)
def test_modes_that_run_no_job_are_told_from_the_command_line(argv, no_jobs, report):
    """The parse-time model check is skipped where no job runs; the landing page is
    fetched from the bucket only for a report."""
    assert site.runs_no_jobs(argv) is no_jobs and site.makes_report(argv) is report
