"""Site values a profile takes from the environment, checked before anything runs.

Snakemake expands `$NAME` in profile values and leaves an unset one literal: the eks
profile's bucket then fails deep in the storage plugin (an exception group about an
invalid bucket name "$SHARDFLOW_S3_BUCKET") and an unset image only in the kubelet.
`site_env` reads a profile's required variables in one go and stops with one line
naming every unset one; `unexpanded` finds literal `$NAME`s left in settings that
came from any profile (the workflow checks its storage prefix and default
resources with it at parse time).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def missing(names, environ: Mapping[str, str] | None = None) -> list[str]:
    """The names among `names` that are unset or empty in the environment."""
    env = os.environ if environ is None else environ
    return [n for n in names if not env.get(n)]


def site_env(profile: str, *names: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: value} for a profile's required variables; exits with one line naming
    the unset ones (a SystemExit passes through Snakemake's profile templating)."""
    env = os.environ if environ is None else environ
    unset = missing(names, env)
    if unset:
        sys.exit(
            f"profile {profile}: set the environment variable{'s' if len(unset) > 1 else ''} "
            f"{', '.join(unset)} (profiles/README.md, '{profile}')"
        )
    return {n: env[n] for n in names}


def unexpanded(settings: Mapping[str, object], environ: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{setting: [NAME, ...]} for string settings that still hold a literal `$NAME`
    whose variable is unset, i.e. a profile value Snakemake could not expand."""
    env = os.environ if environ is None else environ
    found: dict[str, list[str]] = {}
    for key, value in settings.items():
        if not isinstance(value, str):
            continue
        names = [a or b for a, b in _VARIABLE.findall(value)]
        unset = [n for n in dict.fromkeys(names) if n not in env]
        if unset:
            found[key] = unset
    return found


def unexpanded_message(found: Mapping[str, list[str]]) -> str:
    names = list(dict.fromkeys(n for ns in found.values() for n in ns))
    where = "; ".join(f"{key} uses ${', $'.join(ns)}" for key, ns in found.items())
    return f"unset environment variable{'s' if len(names) > 1 else ''} {', '.join(names)} in the profile ({where})"


# What the installed executor plugins make of the resources that can get a job a GPU:
# the SLURM plugin's sbatch (snakemake-executor-plugin-slurm 2.8, utils.set_gres_string:
# a `gres` naming gpu, a `gpu_model`, a `gpu`), its job step's srun inside the allocation
# (snakemake-executor-plugin-slurm-jobstep 0.6.1, get_gpu_setting: the first of `gpus`,
# `gpu`, `nvidia_gpu` that the job has) and the Kubernetes plugin's pod (0.5.1: `gpu`
# alone, an nvidia.com/gpu request with the GPU toleration; it ignores the others).
_STEP_GPUS = ("gpus", "gpu", "nvidia_gpu")


def _count(value) -> int | None:
    """A GPU count given as an integer; None for an expression evaluated per job."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gpu_asks(resources: Mapping[str, object]) -> dict[str, str]:
    """{name: what the plugins ask for} for each resource among `resources` (a job's, as
    plain values) that gets the job a GPU, as the plugins read them (above).
    A `gpu` of 0, and a count the job step reads after another one, ask for nothing."""
    asks = {}
    gres, model, gpu = resources.get("gres"), resources.get("gpu_model"), resources.get("gpu")
    if gres and "gpu" in str(gres).lower():
        asks["gres"] = f"the SLURM plugin asks sbatch for --gres={gres}"
    if model:  # a job without `gpu` counts 1
        asks["gpu_model"] = f"the SLURM plugin asks sbatch for --gpus={model}:{1 if gpu is None else gpu}"
    count = _count(gpu)
    if count:
        asks["gpu"] = (
            f"the SLURM plugin asks sbatch for --gpus={f'{model}:' if model else ''}{count} "
            f"and the Kubernetes plugin requests {count} GPU{'s' if count > 1 else ''} for its pod"
        )
    step = next((name for name in _STEP_GPUS if resources.get(name) is not None), None)
    count = _count(resources.get(step))
    if step in ("gpus", "nvidia_gpu") and count:
        asks[step] = f"the SLURM plugin's job step runs it with srun --gpus={count} (sbatch gets no GPU from {step})"
    return asks


def gpu_requests(
    set_resources: Mapping[str, Mapping[str, object]], rules: Iterable[str], gpu: Mapping[str, int] | None = None
) -> list[tuple[str, str, object, str]]:
    """(rule, name, value, what the plugins ask for) for each set-resources value of
    `rules` that gets their jobs a GPU (gpu_asks), whatever the job's own `gpu` resource
    (`gpu[rule]`; none if absent) would give them."""
    gpu = gpu or {}
    found = []
    for rule in rules:
        given = {name: getattr(v, "raw", v) for name, v in (set_resources.get(rule) or {}).items()}
        asks = gpu_asks({**({"gpu": gpu[rule]} if rule in gpu else {}), **given})
        found += [(rule, name, value, asks[name]) for name, value in given.items() if name in asks]
    return found


def gpu_request_warnings(
    set_resources: Mapping[str, Mapping[str, object]],
    on_cpu: Mapping[str, str],
    gpu: Mapping[str, int] | None = None,
    cpu_rules: Iterable[str] = (),
) -> list[str]:
    """One line per set-resources value that gets a GPU for jobs that use none: those of
    the GPU rules in `on_cpu` ({rule: why its jobs run on the CPU in this run}) and of
    `cpu_rules`, the workflow's rules that are no GPU rule (plan.cpu_rules). Each names
    the rule, the value, what the executor plugins make of it and what to change."""
    rules = {**on_cpu, **{rule: None for rule in cpu_rules if rule not in on_cpu}}
    lines = []
    for rule, name, value, asks in gpu_requests(set_resources, rules, gpu):
        if rules[rule] is None:
            why, change = "not a GPU rule", "take it out of the profile"
        else:
            why, change = rules[rule], "leave it out of the profile for this run"
        lines.append(
            f"set-resources {rule}:{name}={value}: {asks} for each {rule} job, which runs on the CPU ({why}) "
            f"and uses no GPU; {change} (profiles/README.md, {'slurm, eks' if name == 'gpu' else 'slurm'})"
        )
    return lines


def python_first_on_path(environ: dict | None = None, executable: str = sys.executable) -> bool:
    """Put the folder of the interpreter running the workflow first on PATH (where it has
    a `python`), so that a shell rule's `python` is that interpreter, as a script rule's
    is: a user may start `.venv/bin/snakemake` without activating the venv. Jobs inherit
    PATH; with a conda deployment the job's environment goes in front of it. Returns
    whether PATH changed."""
    env = os.environ if environ is None else environ
    folder = os.path.dirname(executable)
    path = env.get("PATH", "")
    if not os.path.exists(os.path.join(folder, "python")) or path.split(os.pathsep)[0] == folder:
        return False
    env["PATH"] = folder + (os.pathsep + path if path else "")
    return True


# Command-line modes in which Snakemake runs no job: they print the graph or lists, keep
# its books (--unlock, --touch, --cleanup-metadata) or read finished outputs (--report).
# Parse-time checks of what the jobs will load are skipped there: a model moved after a
# finished run must not block `--unlock` or `--report`.
NO_JOB_FLAGS = frozenset({
    "--unlock", "--touch", "-t", "--report", "--lint", "--list-rules", "--list", "-l", "--list-target-rules",
    "--lt", "--summary", "-S", "--detailed-summary", "-D", "--list-changes", "--lc", "--dag", "--rulegraph",
    "--filegraph", "--d3dag", "--cleanup-metadata", "--cm", "--cleanup-shadow", "--delete-all-output",
    "--delete-temp-output", "--containerize", "--export-cwl", "--archive", "--generate-unit-tests",
    "--print-compilation", "--list-conda-envs", "--conda-cleanup-envs", "--conda-create-envs-only",
})


def command_flags(argv: Sequence[str] | None = None) -> set[str]:
    """The options on Snakemake's command line (`--name`, `--name=value` as `--name`)."""
    args = sys.argv[1:] if argv is None else argv[1:]
    return {a.split("=", 1)[0] for a in args if a.startswith("-")}


def runs_no_jobs(argv: Sequence[str] | None = None) -> bool:
    """Whether this Snakemake was started in a mode that runs no job (NO_JOB_FLAGS)."""
    return bool(command_flags(argv) & NO_JOB_FLAGS)


def makes_report(argv: Sequence[str] | None = None) -> bool:
    """Whether this Snakemake was started to make the report (`--report`)."""
    return "--report" in command_flags(argv)
