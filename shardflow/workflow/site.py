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


def gpu_requests(
    set_resources: Mapping[str, Mapping[str, object]], rules: Iterable[str], gpu: Mapping[str, int] | None = None
) -> list[tuple[str, str, str]]:
    """(rule, `rule:name=value`, what sbatch gets) for each set-resources value of `rules`
    that asks SLURM for a GPU whatever the job's `gpu` resource (`gpu[rule]`; none if
    absent), as snakemake-executor-plugin-slurm 2.8 builds the request
    (utils.set_gres_string): a `gres` naming gpu passes as `--gres=<gres>`, and a
    `gpu_model` as `--gpus=<model>:<gpu>`, where a job without `gpu` counts 1."""
    gpu = gpu or {}
    found = []
    for rule in rules:
        for name, value in (set_resources.get(rule) or {}).items():
            value = getattr(value, "raw", value)  # Snakemake's Resource, or the value
            if name == "gpu_model" and value:
                found.append((rule, f"{rule}:{name}={value}", f"--gpus={value}:{gpu.get(rule, 1)}"))
            elif name == "gres" and "gpu" in str(value).lower():
                found.append((rule, f"{rule}:{name}={value}", f"--gres={value}"))
    return found


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
