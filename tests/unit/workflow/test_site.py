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


def test_gpu_requests_name_what_the_slurm_plugin_asks_sbatch_for_whatever_the_jobs_gpu_says():
    """A gpu_model, or a gres naming gpu, asks sbatch for a GPU for a job without a `gpu`
    resource (a GPU rule's job on the CPU); train's jobs there have gpu 0. What
    gpu_requests says sbatch gets is checked against the installed plugin's own
    (snakemake-executor-plugin-slurm 2.8, utils.set_gres_string)."""
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")

    class Resource:  # Snakemake's parsed form keeps the value as given in `raw`
        def __init__(self, raw):
            self.raw = raw

    given = {
        "summarise": {"gpu_model": Resource("a100"), "slurm_partition": "gpu", "mem_mb": 2000},
        "sweep_summarise": {"gres": "gpu:1"},
        "merge_summaries": {"gpu_model": "a100"},
        "embed": {"gres": "tmp:10G", "slurm_partition": "gpu"},
        "train": {"gpu_model": "h100", "slurm_extra": "'--exclude=node17'"},
    }
    rules = ("summarise", "sweep_summarise", "embed", "train", "sweep_train")
    found = site.gpu_requests(given, rules, {"train": 0})
    assert found == [
        ("summarise", "summarise:gpu_model=a100", "--gpus=a100:1"),
        ("sweep_summarise", "sweep_summarise:gres=gpu:1", "--gres=gpu:1"),
        ("train", "train:gpu_model=h100", "--gpus=h100:0"),
    ]

    class Resources(dict):  # a job's resources, as the plugin reads them
        __getattr__ = dict.__getitem__

    def sbatch(rule):
        values = {name: getattr(v, "raw", v) for name, v in given[rule].items()}
        job = SimpleNamespace(resources=Resources(values, **({"gpu": 0} if rule == "train" else {})))
        return utils.set_gres_string(job).strip()

    assert [sbatch(rule) for rule, _, _ in found] == [option for _, _, option in found]
    assert "gpu" not in sbatch("embed")  # a partition, or another gres, asks for no GPU


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
