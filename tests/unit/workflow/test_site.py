import re
from types import SimpleNamespace

import pytest
from snakemake.resources import Resources

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


class _Resources(dict):  # a job's resources, as the plugins read them
    __getattr__ = dict.__getitem__


def _resources(*assignments):
    """set-resources (or default-resources) values as the parse gets them from a profile:
    Snakemake's own parse of `name=value` (cli.parse_set_resources)."""
    return Resources.parse(list(assignments), allow_expressions=True)


def test_known_value_evaluates_what_every_job_gets_and_nothing_that_depends_on_the_job(monkeypatch):
    """A profile's integers stay integers; other text is an expression Snakemake evaluates
    per job, or text where it is none (a100, gpu:1): the parse knows what every job gets
    unless the expression reads the job's attempt, input, wildcards or threads, fails, or
    is a function (the Python API's). A YTE `?expression` reaches the parse evaluated."""
    monkeypatch.setenv("SHARDFLOW_TEST_GPUS", "3")
    given = _resources(
        "gpu=2",
        "gpu_model=a100",
        "gres=gpu:1",
        "nvidia_gpu='gpu:2'",
        "gpus=1 + 1",
        "g1=$SHARDFLOW_TEST_GPUS",
        "g2=1 if attempt > 1 else 0",
        "g3=input.size_mb // 1000",
        "g4=len(wildcards)",
        "g5=threads",
        "g6=1 // 0",
    )
    values = {name: site.known_value(resource, "embed") for name, resource in given.items()}
    assert values == {
        "gpu": (2, True),
        "gpu_model": ("a100", True),
        "gres": ("gpu:1", True),
        "nvidia_gpu": ("gpu:2", True),
        "gpus": (2, True),
        "g1": (3, True),
        "g2": (None, False),
        "g3": (None, False),
        "g4": (None, False),
        "g5": (None, False),
        "g6": (None, False),
    }
    function = Resources.from_mapping({"gpu": lambda wildcards: 1})["gpu"]
    assert site.known_value(function) == (None, False)
    assert site.known_value(0) == (0, True)  # a plain value


def test_profile_text_that_python_reads_as_a_function_is_named(monkeypatch):
    """Snakemake evaluates a profile's resource text as Python per job: a partition or
    account named like a built-in (all, open, max) becomes that function, and every job
    stopped with "Resource must be evaluated within the context of a rule", naming
    nothing. The parse names the setting and the quoting that keeps it text."""
    monkeypatch.setenv("SHARDFLOW_TEST_PARTITION", "all")
    given = _resources(
        "slurm_partition=$SHARDFLOW_TEST_PARTITION",
        "slurm_account=open",
        "qos='max'",  # quoted: text
        "constraint=cpu",  # no Python name: text
        "mem_mb=4000",
        "gpu=max(1, attempt)",  # reads the job's attempt: evaluated per job, a number
        "machine_type=ipu",  # fails (NameError): text
    )
    settings = {f"default-resources {name}": resource for name, resource in given.items()}
    job = given["slurm_account"].evaluate(None, input=(), attempt=1, threads=1, rulename="merge", async_run=None)
    with pytest.raises(ValueError, match="Resource must be evaluated within the context of a rule"):
        _ = job.value  # what every job met, in Snakemake 9.27
    found = site.read_as_functions(settings)
    assert found == {
        "default-resources slurm_partition": ("$SHARDFLOW_TEST_PARTITION", "all"),
        "default-resources slurm_account": ("open", "open"),
    }
    message = site.read_as_functions_message(found)
    assert message.startswith(
        "profile resource values that Snakemake reads as Python functions, which no job can be given: "
        "default-resources slurm_partition=$SHARDFLOW_TEST_PARTITION (all); default-resources slurm_account=open. "
    )
    assert '''slurm_account: "'open'"''' in message and "profiles/README.md" in message
    assert site.read_as_functions({"default-resources mem_mb": 4000, "x": None}) == {}


def test_gpu_asks_say_what_the_slurm_plugins_ask_for():
    """A gpu_model, a gres naming gpu or a `gpu` above 0 asks sbatch for a GPU for a job
    without a `gpu` resource (a GPU rule's job on the CPU; train's there has a gpu of 0,
    which a gpu_model asks for as <model>:0); a `gpus` or `nvidia_gpu` asks the job
    step's srun, where the job has no count read before it; a `gpu` of 0 asks SLURM for
    nothing. What gpu_asks says sbatch and srun get is checked
    against the installed plugins' own (snakemake-executor-plugin-slurm 2.8,
    utils.set_gres_string; -slurm-jobstep 0.6.1, get_gpu_setting)."""
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")
    jobstep = pytest.importorskip("snakemake_executor_plugin_slurm_jobstep")

    jobs = {
        "a": {"gpu_model": "a100", "slurm_partition": "gpu", "mem_mb": 2000},
        "b": {"gres": "gpu:1"},
        "c": {"gres": "tmp:10G", "slurm_partition": "gpu"},
        "d": {"gpu_model": "h100", "gpu": 0},
        "e": {"gpu": 2},
        "f": {"gpus": 1},
        "g": {"nvidia_gpu": 1},
        "h": {"nvidia_gpu": 2, "gpu": 0},  # the job step reads the gpu of 0 first
        "i": {"gpu": 0, "gpus": 0},
        "j": {"gpu_model": "a100", "gpu": 2},
        "k": {"gpu": 0, "gpu_manufacturer": "nvidia"},  # the Kubernetes toleration alone
    }
    both = "the SLURM plugin asks sbatch for --gpus={} and the Kubernetes plugin requests 2 GPUs for its pod"
    step = "the SLURM plugin's job step runs it with srun --gpus=1 (sbatch gets no GPU from {})"
    asks = {job: site.gpu_asks(resources) for job, resources in jobs.items()}
    assert asks == {
        "a": {"gpu_model": "the SLURM plugin asks sbatch for --gpus=a100:1"},
        "b": {"gres": "the SLURM plugin asks sbatch for --gres=gpu:1"},
        "c": {},
        "d": {"gpu_model": "the SLURM plugin asks sbatch for --gpus=h100:0"},
        "e": {"gpu": both.format(2)},
        "f": {"gpus": step.format("gpus")},
        "g": {"nvidia_gpu": step.format("nvidia_gpu")},
        "h": {},
        "i": {},
        "j": {"gpu_model": "the SLURM plugin asks sbatch for --gpus=a100:2", "gpu": both.format("a100:2")},
        "k": {
            "gpu": "the Kubernetes plugin gives its pod the nvidia.com/gpu toleration (a GPU node may take it) and a "
            "request of 0 GPUs"
        },
    }
    for name, resources in jobs.items():
        job = SimpleNamespace(resources=_Resources(resources))
        said = " ".join(asks[name].values())
        sbatch = [option for option in utils.set_gres_string(job).split() if "gpu" in option]
        srun = jobstep.get_gpu_setting(job)
        assert set(re.findall(r"sbatch for (\S+)", said)) == set(sbatch), name
        assert re.findall(r"srun (--gpus=\d+)", said) == ([srun] if srun and not sbatch else []), name
    assert "--gres=tmp:10G" in utils.set_gres_string(SimpleNamespace(resources=_Resources(jobs["c"])))


def _kubernetes_pod(resources: dict):
    """The pod spec the Kubernetes plugin (0.5.1) submits for a job with `resources`, from
    its own run_job with the API call caught, or the error it raises instead."""
    import logging

    kubernetes = pytest.importorskip("snakemake_executor_plugin_kubernetes")
    submitted = []
    executor = kubernetes.Executor.__new__(kubernetes.Executor)
    executor.__dict__.update(
        format_job_exec=lambda job: "true",
        run_namespace="test",
        container_image="image",
        persistent_volumes=[],
        workflow=SimpleNamespace(deployment_settings=SimpleNamespace(deployment_method=[])),
        k8s_service_account_name=None,
        secret_envvars={},
        k8s_cpu_scalar=0.95,
        privileged=False,
        logger=logging.getLogger("test_site"),
        namespace="shardflow",
        batchapi=SimpleNamespace(create_namespaced_job=lambda namespace, body: submitted.append(body)),
        _kubernetes_retry=lambda call: call(),
        report_job_submission=lambda info: None,
    )
    job = SimpleNamespace(resources=resources, jobid=1, attempt=1, is_containerized=False)
    try:
        executor.run_job(job)
    except Exception as err:  # noqa: BLE001 - the plugin's refusal is the answer
        return err
    return submitted[0].spec.template.spec


@pytest.mark.parametrize(
    ("resources", "asks_for"),
    [
        ({"gpu": 0, "gpu_manufacturer": "nvidia", "scale": 0}, "toleration"),
        ({"gpu": 2, "gpu_manufacturer": "nvidia", "scale": 0}, "requests 2 GPUs"),
        ({"gpu_manufacturer": "nvidia", "gpu_model": "a100", "gres": "gpu:1", "gpus": 1, "nvidia_gpu": 1}, None),
        ({"gpu": 0}, "refused"),
    ],
)
def test_gpu_asks_say_what_the_kubernetes_plugin_gives_the_pod(resources, asks_for):
    """The Kubernetes plugin (0.5.1) reads `gpu` alone and keys on it being there: a
    `gpu` of 0 still gets the pod the GPU toleration and a request of 0 GPUs, which lets
    a CPU job onto a GPU node; without a gpu_manufacturer it refuses the job (no
    toleration to go unnoticed). Run through the plugin's own run_job."""
    pod = _kubernetes_pod(resources)
    asks = site.gpu_asks(resources).get("gpu", "")
    if asks_for == "refused":
        assert "no manufacturer set" in str(pod) and not asks
        return
    container = pod.containers[0].resources
    tolerated = [t.key for t in pod.tolerations or []] == ["nvidia.com/gpu"]
    assert tolerated == (asks_for is not None) and (asks_for or "") in asks and bool(asks) == tolerated
    if tolerated:
        count = str(resources["gpu"])
        assert container.requests["nvidia.com/gpu"] == container.limits["nvidia.com/gpu"] == count
    else:
        assert not any("gpu" in key for key in container.requests)


def test_gpu_request_warnings_name_the_rule_the_value_and_what_to_change():
    on_cpu = {"embed": "gpu_jobs.device cpu", "train": "gpu_jobs.device cpu", "summarise": "summarise.method lead"}
    given = {
        "embed": _resources("gpu=1", "machine_type=g5.xlarge"),
        "train": {"gpu_model": "a100"},
        "summarise": {"gpus": 1},
        "merge": {"gpu": 1},
    }
    assert site.gpu_request_warnings(given, on_cpu, gpu={"train": 0}) == [
        "set-resources embed:gpu=1: the SLURM plugin asks sbatch for --gpus=1 and the Kubernetes plugin requests "
        "1 GPU for its pod for each embed job, which runs on the CPU (gpu_jobs.device cpu) and uses no GPU; leave it "
        "out of the profile for this run (profiles/README.md, slurm, eks)",
        # train on the CPU keeps gpu=0 (its launcher's count), so sbatch gets a100:0
        "set-resources train:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:0 for each train job, "
        "which runs on the CPU (gpu_jobs.device cpu) and uses no GPU; leave it out of the profile for this run "
        "(profiles/README.md, slurm)",
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
        "report": {"slurm_partition": "gpu", "gpu": 0},  # a partition, a gpu of 0: no GPU asked for
        "embed": {"gpu_model": "a100"},
        "sweep_embed_chunk": {"gpu_model": "a100"},  # a GPU rule whose jobs get their GPU
    }
    lines = site.gpu_request_warnings(
        given,
        {"embed": "gpu_jobs.device cpu"},
        cpu_rules=["split_news", "merge", "verify", "report"],
        gpu_rules=["embed", "sweep_embed_chunk"],
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


def test_a_gpu_of_0_is_named_where_the_kubernetes_plugin_gives_the_pod_the_gpu_toleration():
    """A set-resources `gpu` of 0 gets an EKS pod the GPU toleration (the executor is not
    known at parse time; a gpu_manufacturer, which only that plugin reads and which it
    requires of a job with a gpu, is): named for every rule, a GPU rule that would run on
    a GPU included (gpu 0 makes its jobs CPU jobs); without a manufacturer, or elsewhere
    than in a `gpu`, a 0 asks for nothing."""
    defaults = _resources("gpu_manufacturer=nvidia", "scale=0", "mem_mb=4000")
    given = {
        "train": _resources("gpu=0"),  # train.gpus is at least 1: gpu 0 is the profile's
        "embed": _resources("gpu=0", "gpu_manufacturer=amd"),
        "summarise": _resources("gpu=0"),  # on the CPU
        "merge": _resources("gpu=0"),
        "verify": _resources("gpu=0", "gpu_manufacturer=intel"),  # the plugin refuses the job: loud
        "embed_queries": _resources("gpu=2"),  # its GPUs
    }
    lines = site.gpu_request_warnings(
        given,
        {"summarise": "summarise.method lead"},
        cpu_rules=["merge", "verify"],
        gpu_rules=["train", "embed", "summarise", "embed_queries"],
        default_resources=defaults,
    )
    tolerates = (
        "the Kubernetes plugin gives its pod the {}.com/gpu toleration (a GPU node may take it) and a request of 0 GPUs"
    )
    assert lines == [
        f"set-resources summarise:gpu=0: {tolerates.format('nvidia')} for each summarise job, which runs on the CPU "
        "(summarise.method lead) and uses no GPU; leave it out of the profile for this run (profiles/README.md, eks)",
        f"set-resources merge:gpu=0: {tolerates.format('nvidia')} for each merge job, which runs on the CPU (not a "
        "GPU rule) and uses no GPU; take it out of the profile (profiles/README.md, eks)",
        f"set-resources train:gpu=0: {tolerates.format('nvidia')} for each train job, which runs on the CPU (its gpu "
        "is 0) and uses no GPU; take it out (gpu_jobs.device cpu runs the GPU rules on the CPU) "
        "(profiles/README.md, eks)",
        f"set-resources embed:gpu=0: {tolerates.format('amd')} for each embed job, which runs on the CPU (its gpu "
        "is 0) and uses no GPU; take it out (gpu_jobs.device cpu runs the GPU rules on the CPU) "
        "(profiles/README.md, eks)",
    ]
    assert site.gpu_request_warnings(given, {}, ["merge"], ["train"]) == []  # no manufacturer: the plugin refuses


def test_trains_own_gpu_of_0_on_the_cpu_is_named_where_the_profile_gives_a_gpu_manufacturer():
    """train's jobs on the CPU keep gpu=0 (plan.GPU_ON_CPU: its shell command hands the
    count to the launcher), so a gpu_manufacturer, the eks profile's default-resources
    one included, gets their pods the Kubernetes GPU toleration: named for each such
    rule, with where the manufacturer comes from and the remedy (a machine_type pins the
    pods to an instance type, and then nothing is named). A set-resources gpu=0 equals
    the rule's own: named the same way, as leaving it out would change nothing."""
    on_cpu = {rule: "gpu_jobs.device cpu" for rule in ("train", "sweep_train", "embed")}
    defaults = _resources("gpu_manufacturer=nvidia", "scale=0", "mem_mb=4000")
    own = {"train": 0, "sweep_train": 0}
    tolerates = (
        "the Kubernetes plugin gives its pod the {}.com/gpu toleration (a GPU node may take it) and a request of 0 GPUs"
    )

    def line(where, rule, manufacturer="nvidia"):
        return (
            f"{where}gpu_manufacturer={manufacturer}: {tolerates.format(manufacturer)} for each {rule} job, which "
            "runs on the CPU (gpu_jobs.device cpu) and uses no GPU but keeps gpu=0, the count its shell command hands "
            f"the launcher; pin {rule}'s pods to a CPU instance type for this run, "
            f"set-resources {rule}:machine_type=<type> (leaving out gpu_manufacturer does not help: the plugin refuses "
            "a job with a gpu and none) (profiles/README.md, eks)"
        )

    # the eks profile's defaults: both train rules, embed (no gpu on the CPU) not
    assert site.gpu_request_warnings({}, on_cpu, default_resources=defaults, gpu=own) == [
        line("default-resources ", "train"),
        line("default-resources ", "sweep_train"),
    ]
    given = {"train": _resources("gpu=0"), "sweep_train": _resources("gpu_manufacturer=amd")}
    assert site.gpu_request_warnings(given, on_cpu, gpu=own) == [
        line("set-resources sweep_train:", "sweep_train", "amd")
    ]
    assert site.gpu_request_warnings(given, on_cpu, default_resources=defaults, gpu=own) == [
        line("default-resources ", "train"),
        line("set-resources sweep_train:", "sweep_train", "amd"),
    ]
    pinned = {"train": _resources("machine_type=m5.xlarge"), "sweep_train": _resources("machine_type=m5.xlarge")}
    assert site.gpu_request_warnings(pinned, on_cpu, default_resources=defaults, gpu=own) == []
    # on GPUs (not on the CPU) train's gpu is train.gpus: nothing to name
    assert site.gpu_request_warnings({}, {"embed": "gpu_jobs.device cpu"}, default_resources=defaults, gpu=own) == []
    # what the line says is what the plugin does with train's gpu=0 (0.5.1's run_job)
    pod = _kubernetes_pod({"gpu": 0, "gpu_manufacturer": "nvidia", "scale": 0, "machine_type": "m5.xlarge"})
    assert [t.key for t in pod.tolerations] == ["nvidia.com/gpu"]
    assert pod.node_selector == {"node.kubernetes.io/instance-type": "m5.xlarge"}
    assert "no manufacturer set" in str(_kubernetes_pod({"gpu": 0}))


def test_default_resources_that_get_jobs_a_gpu_are_named_with_the_rules_they_reach():
    """A GPU value in default-resources reaches every job whose rule does not set the key:
    `gpu` the CPU rules only (a GPU rule sets its own: none on the CPU, so also not there),
    the others every rule, the GPU rules on the CPU included; a rule whose set-resources
    sets the key is not reached. One line per key, naming the rules for each ask."""
    defaults = _resources("gpu=1", "gpu_model=a100", "gres=tmp:1G", "mem_mb=4000", "slurm_partition=cpu")
    given = {"verify": _resources("gpu_model=h100"), "report": _resources("gpu=2")}
    lines = site.gpu_request_warnings(
        given,
        {"summarise": "summarise.method lead"},
        cpu_rules=["merge", "verify", "report"],
        gpu_rules=["embed", "summarise"],
        default_resources=defaults,
    )
    assert lines == [
        "set-resources verify:gpu_model=h100: the SLURM plugin asks sbatch for --gpus=h100:1 for each verify job, "
        "which runs on the CPU (not a GPU rule) and uses no GPU; take it out of the profile (profiles/README.md, slurm)",
        "set-resources report:gpu=2: the SLURM plugin asks sbatch for --gpus=a100:2 and the Kubernetes plugin "
        "requests 2 GPUs for its pod for each report job, which runs on the CPU (not a GPU rule) and uses no GPU; "
        "take it out of the profile (profiles/README.md, slurm, eks)",
        "default-resources gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:1 for each job of summarise "
        "(summarise.method lead), merge; the SLURM plugin asks sbatch for --gpus=a100:2 for each job of report, "
        "which use no GPU; take it out of default-resources: a GPU rule's jobs get their GPUs from "
        "resources.<rule>.gpu, a gpu_model goes to each GPU rule in set-resources (profiles/README.md, slurm)",
        "default-resources gpu=1: the SLURM plugin asks sbatch for --gpus=a100:1 and the Kubernetes plugin requests "
        "1 GPU for its pod for each job of merge; the SLURM plugin asks sbatch for --gpus=h100:1 and the Kubernetes "
        "plugin requests 1 GPU for its pod for each job of verify, which use no GPU; take it out of "
        "default-resources: a GPU rule's jobs get their GPUs from resources.<rule>.gpu (profiles/README.md, slurm, eks)",
    ]


def test_a_value_the_parse_cannot_evaluate_is_named_once_as_not_checked():
    """An expression that reads the job's values, or a function, is named once, as not
    checked, where it would be checked: for each rule whose jobs use no GPU, for a GPU
    rule's `gpu` (it could be 0), for a default-resources value with the rules it reaches.
    An unknown `gpu` stands in the others' asks as `<gpu>`: sbatch gets --gpus=a100:<gpu>,
    and the job step reads it before nvidia_gpu."""
    given = {
        "merge": _resources("gpu=1 if attempt > 1 else 0", "gpu_model=a100", "nvidia_gpu=1"),
        "train": _resources("gpu=max(0, attempt - 1)"),
        "embed": _resources("gpu_model=input.size_mb"),  # a GPU rule's model: not asked of
        "verify": Resources.from_mapping({"gres": lambda wildcards: "gpu:1"}),
    }
    defaults = _resources("nvidia_gpu=threads", "gpu_manufacturer=nvidia")
    lines = site.gpu_request_warnings(given, {}, ["merge", "verify"], ["train", "embed"], defaults)
    reason = (
        "not checked: the parse cannot evaluate it (it reads the job's wildcards, input, attempt or threads, is a "
        "function, or failed), so whether it gets {} a GPU, or a GPU node, that they do not use is not known; give a "
        "plain value to have it checked (profiles/README.md)"
    )
    assert lines == [
        "set-resources merge:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:<gpu> for each merge job, "
        "which runs on the CPU (not a GPU rule) and uses no GPU; take it out of the profile (profiles/README.md, slurm)",
        "set-resources merge:gpu=1 if attempt > 1 else 0: " + reason.format("merge jobs"),
        "set-resources verify:gres=<function>: " + reason.format("verify jobs"),
        "set-resources train:gpu=max(0, attempt - 1): " + reason.format("train jobs"),
        "default-resources nvidia_gpu=threads: " + reason.format("the jobs of verify"),  # merge sets its own
    ]


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


@pytest.mark.parametrize(
    "argv, every, rules",
    [
        (["snakemake", "-n"], False, set()),
        (["snakemake", "--forceall"], True, set()),
        (["snakemake", "-nF", "--cores", "2"], True, set()),
        (["snakemake", "--forcerun", "embed", "summarise", "-n"], False, {"embed", "summarise"}),
        (["snakemake", "-nR", "embed", "--config", "n_chunks=2"], False, {"embed"}),
        (["snakemake", "--forcerun=embed"], False, {"embed"}),
        (["snakemake", "-R"], False, set()),
        (["snakemake", "--config", "x=-R", "results/Fancy"], False, set()),  # values, targets: no flags
        (["snakemake", "-Rembed", "-sFoo"], False, {"embed"}),  # -s's value is no -F
        (["snakemake", "--forcerun", "embed", "--forcerun", "summarise"], False, {"summarise"}),  # the last
        (["snakemake", "--forcer", "embed"], False, {"embed"}),  # an abbreviation
    ],
)
def test_the_rules_a_run_remakes_are_read_from_its_command_line(argv, every, rules, no_profile):
    """The parse-time check of a model changed in place leaves to the run the jobs it
    remakes (rules/common.smk check_models): Snakemake sets forcerun only after the parse."""
    assert site.forced_rules(argv) == (every, frozenset(rules))


@pytest.fixture
def no_profile(tmp_path, monkeypatch):
    """An empty folder to start Snakemake in (no profiles/default), no SNAKEMAKE_PROFILE."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    return tmp_path


def _profile(folder, text):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(text)


def test_the_rules_a_profile_forces_are_read_as_snakemake_applies_it(no_profile, monkeypatch, capsys):
    """A profile's forcerun: or forceall: remakes jobs as the command line's would (read by
    Snakemake's own parse_args): from --profile (several: the later replaces the key), the
    SNAKEMAKE_PROFILE variable, --workflow-profile, or profiles/default beside a Snakefile;
    a --forcerun on the command line replaces the profile's whole. Snakemake moves into
    --directory before the parse: the profile is then looked up from the shell's PWD."""
    _profile(no_profile / "p", "forcerun: [embed, summarise]\n")
    _profile(no_profile / "q", "forceall: true\n")
    _profile(no_profile / "w", "forcerun:\n  - merge\n")
    assert site.forced_rules(["snakemake", "--profile", "p", "-n"]) == (False, {"embed", "summarise"})
    assert site.forced_rules(["snakemake", "--profile", "p", "-R", "train"]) == (False, {"train"})
    assert site.forced_rules(["snakemake", "--profile", "p", "--profile", "q"]) == (True, {"embed", "summarise"})
    assert site.forced_rules(["snakemake", "--workflow-profile", "w"]) == (False, {"merge"})
    assert site.forced_rules(["snakemake", "-n"]) == (False, frozenset())
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "q")
    assert site.forced_rules(["snakemake", "-n"]) == (True, frozenset())
    monkeypatch.delenv("SNAKEMAKE_PROFILE")
    (no_profile / "Snakefile").write_text("")
    _profile(no_profile / "profiles" / "default", "forcerun: [verify]\n")
    assert site.forced_rules(["snakemake", "-n"]) == (False, {"verify"})
    assert site.forced_rules(["snakemake", "--profile", "p"]) == (False, {"verify"})  # the workflow profile's, later
    assert site.forced_rules(["snakemake", "--workflow-profile", "none", "--profile", "p"]) == (
        False,
        {"embed", "summarise"},
    )
    (no_profile / "run").mkdir()
    monkeypatch.chdir(no_profile / "run")  # as Snakemake leaves it after -d run
    assert site.forced_rules(["snakemake", "-d", "run", "--profile", "q", "-n"]) == (True, {"verify"})
    monkeypatch.setenv("PWD", "/")  # not the start folder: the command line alone
    assert site.forced_rules(["snakemake", "-d", "run", "--profile", "q", "-R", "x"]) == (False, {"x"})
    assert capsys.readouterr().err == ""  # Snakemake's "Using profile ..." is not printed again


def test_an_absolute_directory_does_not_make_pwd_the_start_folder(no_profile, monkeypatch):
    """`-d /abs/run` is the same folder from any start, so PWD joined with it proves
    nothing: a program that runs `snakemake -d run` with cwd=run (tests/helpers) leaves
    its own PWD, and the profile there is not the one Snakemake read. Where both folders
    read a profile and they differ, the start is not known: the command line alone."""
    run, elsewhere = no_profile / "run", no_profile / "elsewhere"
    _profile(run / "p", "forcerun: [embed]\n")
    _profile(elsewhere / "p", "forcerun: [merge]\n")
    monkeypatch.chdir(run)
    monkeypatch.setenv("PWD", str(elsewhere))
    assert site.forced_rules(["snakemake", "-d", str(run), "--profile", "p", "-n"]) == (False, frozenset())
    assert site.snakemake_arguments(["snakemake", "-d", str(run), "--profile", "p"]) is None
    # Only PWD reads it: Snakemake, which read it, started there.
    (run / "p" / "config.yaml").unlink()
    (run / "p").rmdir()
    assert site.forced_rules(["snakemake", "-d", str(run), "--profile", "p", "-n"]) == (False, {"merge"})
    # Only here reads it: as before, here.
    _profile(run / "q", "forcerun: [verify]\n")
    assert site.forced_rules(["snakemake", "-d", str(run), "--profile", "q", "-n"]) == (False, {"verify"})


def test_each_config_option_of_the_command_line_is_read_with_its_entries():
    """--config's entries per time it is given (Snakemake keeps only the last list)."""
    argv = ["snakemake", "-C", "a=1", "b={x: -1}", "-n", "--config=c=3", "--config", "d=4", "results/x"]
    assert site.config_arguments(argv) == [["a=1", "b={x: -1}"], ["c=3"], ["d=4", "results/x"]]
    assert site.config_arguments(["snakemake", "--configfile", "c.yaml", "-n"]) == []
    assert site.config_arguments(["snakemake", "-Ca=1", "-C", "b=2"]) == [["a=1"], ["b=2"]]


def test_a_profiles_config_that_a_later_config_replaces_is_named(no_profile, capsys):
    """Snakemake makes a profile's config: the default of --config: a --config on the
    command line replaces the whole list (Snakemake's own parser shows it), and so does a
    later profile's config:. What that drops is named with the profile's file; a setting
    given again (same value, or another: asked for) is no matter."""
    from snakemake.cli import parse_args

    from shardflow.core.config import profile_config_problems

    _profile(no_profile / "p", "config:\n  dataset: x\n  n_chunks: 8\n  embedding: {dtype: float16, max_length: 64}\n")
    _profile(no_profile / "q", "config: [n_chunks=3]\n")
    assert parse_args(["--profile", "p", "--config", "n_chunks=8"])[1].config == ["n_chunks=8"]
    capsys.readouterr()
    p, q = str(no_profile / "p" / "config.yaml"), str(no_profile / "q" / "config.yaml")
    argv = ["snakemake", "--profile", "p", "-n", "--config", "n_chunks=4", "embedding={dtype: float16}"]
    found = site.profile_config(argv)
    assert found == (
        [(p, {"dataset": "x", "n_chunks": 8, "embedding": {"dtype": "float16", "max_length": "64"}})],
        {"n_chunks": 4, "embedding": {"dtype": "float16"}},
        True,
    )
    assert profile_config_problems(*found) == [
        f"profile {p}: its config: sets dataset=x, embedding.max_length=64, which Snakemake would drop without a "
        "word: the command line's --config replaces a profile's whole config: (Snakemake reads one list of --config "
        "entries, the last given). Keep them: add them to the command line's --config, or put them in a --configfile"
    ]
    assert profile_config_problems(*site.profile_config(["snakemake", "--profile", "p", "-n"])) == []
    same = ["--config", "dataset=x", "n_chunks=8", "embedding={dtype: float16, max_length: 64}"]
    assert profile_config_problems(*site.profile_config(["snakemake", "--profile", "p", *same])) == []
    assert profile_config_problems(*site.profile_config(["snakemake", "--profile", "p", "--profile", "q"])) == [
        f"profile {p}: its config: sets dataset=x, embedding.dtype=float16, embedding.max_length=64, which Snakemake "
        f"would drop without a word: the config: of profile {q}, read after it, replaces a profile's whole config: "
        "(Snakemake reads one list of --config entries, the last given). Keep them: add them to that one, or put "
        "them in a --configfile"
    ]
    assert site.profile_config(["snakemake", "--profile", "missing"]) == ([], {}, False)  # not read again: no check
    assert capsys.readouterr().err == ""  # Snakemake's "Using profile ..." is not printed again


def test_a_profile_without_a_config_key_is_evaluated_once(no_profile, monkeypatch):
    """A profile's YTE runs again each time it is read (profiles/local runs nvidia-smi):
    profile_config reads a profile a second time only for its `config:` key, not for the
    word in a comment (profiles/eks: "in your config file"), nor in `configfile:`."""
    runs = no_profile / "evaluated"
    monkeypatch.setenv("YTE_RUNS", str(runs))
    yte = "__use_yte__: true\n__definitions__:\n  - import os\n  - open(os.environ['YTE_RUNS'], 'a').write('x')\n"
    _profile(no_profile / "p", yte + "# the workflow config: config/README.md\nconfigfile: c.yaml\ncores: 1\n")
    assert site.profile_config(["snakemake", "--profile", "p", "-n", "--config", "dataset=y"]) == ([], {"dataset": "y"}, True)
    assert runs.read_text() == "x"  # the parse's own reading only
    _profile(no_profile / "q", yte + "cores: 1\nconfig:\n  dataset: x\n")
    assert site.profile_config(["snakemake", "--profile", "q", "--config", "n_chunks=2"])[0] == [
        (str(no_profile / "q" / "config.yaml"), {"dataset": "x"})
    ]
    assert runs.read_text() == "xxx"  # the parse's, and the one that reads its config:


def test_a_profiles_config_is_not_read_again_where_nothing_can_replace_it(no_profile, monkeypatch):
    """Without a --config on the command line, one profile's config: is the run's: only a
    second profile (--profile twice, --workflow-profile, a profiles/default folder) can
    replace it, so a run with one profile (make run's) reads no profile again, and its
    YTE (profiles/local runs nvidia-smi) runs once per parse, as before the check."""
    read = []
    monkeypatch.setattr(site, "snakemake_arguments", lambda argv=None: read.append(argv))
    assert site.profile_config(["snakemake", "--profile", "p", "-n"]) == ([], {}, False)
    assert site.profile_config(["snakemake", "-n"]) == ([], {}, False)
    assert read == []
    for argv in (
        ["snakemake", "--profile", "p", "--config", "n_chunks=2"],
        ["snakemake", "--profile", "p", "--profile", "q"],
        ["snakemake", "--profile=p", "--workflow-profile", "w"],
        ["snakemake", "--prof", "p", "--workflow-prof=w"],  # abbreviated, as argparse takes them
    ):
        site.profile_config(argv)
    assert len(read) == 4
    (no_profile / "profiles" / "default").mkdir(parents=True)  # Snakemake's default workflow profile
    site.profile_config(["snakemake", "--profile", "p"])
    assert len(read) == 5


@pytest.mark.parametrize("profile", ["slurm", "eks"])
def test_a_site_profiles_default_memory_grows_with_each_resubmission(profile):
    """The CPU rules (merges, verify, reports, tokenizer, lead summaries) take their
    memory from the profile's default-resources, and the profile resubmits a failed job
    (`retries`): a job killed for its memory (a SLURM OOM kill, an OOMKilled pod, whose
    limit is its request) must get more on the next attempt, or it is killed again.
    Evaluated as Snakemake evaluates it for each attempt, the first attempt's unchanged."""
    import yaml

    from tests.helpers import REPO

    profile_config = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    (resource,) = _resources(f"mem_mb={profile_config['default-resources']['mem_mb']}").values()
    attempts = range(1, profile_config["retries"] + 2)
    memory = [
        resource.evaluate(None, input=(), attempt=a, threads=1, rulename="merge", async_run=None).value
        for a in attempts
    ]
    assert memory[0] == 4000
    assert memory == sorted(set(memory)), memory  # each attempt more than the last
