"""What the repository itself may hold: no file over 2 MB is tracked (data belongs in
../shared or is generated; a wheel or model committed by accident would weigh on every
clone for good); every folder of tests runs; the Python passes ruff."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.helpers import BIN, REPO

LIMIT = 2 * 1024 * 1024


def test_no_tracked_file_over_2_mb():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked (CI runs from a clone)")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [REPO / p for p in listed.decode().split("\0") if p]
    assert paths, "git ls-files listed nothing"
    big = {str(p.relative_to(REPO)): p.stat().st_size for p in paths if p.is_file() and p.stat().st_size > LIMIT}
    assert not big, f"tracked files over 2 MB: {big}"


def test_no_tracked_symlink_points_outside_the_repository():
    """A link committed by accident (`.venv` -> a venv on one machine, which `.venv/` in
    .gitignore does not match, being no folder) makes every clone use, or trip over,
    that machine's files: `make setup` then sees a venv that is not the clone's."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked (CI runs from a clone)")
    listed = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in listed.decode().split("\0") if line.startswith("120000 ")]
    outside = [p for p in links if not (REPO / p).resolve().is_relative_to(REPO.resolve())]
    assert not outside, f"tracked links that leave the repository: {outside}"
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", ".venv"], cwd=REPO, check=False)
    assert ignored.returncode == 0, ".gitignore must ignore .venv whether it is a folder or a link"


def test_make_test_runs_every_folder_of_tests():
    """`make test` names its folders (slow ones first, for the two workers' balance): a
    new folder of tests must be added there, or its tests would never run in CI."""
    line = next(x for x in (REPO / "Makefile").read_text().splitlines() if x.startswith("TEST_FOLDERS :="))
    listed = set(line.split(":=", 1)[1].split())
    holding = {f"tests/{p.relative_to(REPO / 'tests').parts[0]}" for p in (REPO / "tests").rglob("test_*.py")}
    assert holding <= listed, f"folders of tests missing from TEST_FOLDERS in the Makefile: {sorted(holding - listed)}"
    assert not list((REPO / "tests").glob("test_*.py")), "tests at the top of tests/ would not run: put them in a folder"
    assert re.search(r"^test: setup\n\t.*\$\(TEST_FOLDERS\)$", (REPO / "Makefile").read_text(), flags=re.M)


def test_ruff_check_is_clean():
    """pyproject.toml's [tool.ruff] rules over every Python file: among them bugbear's
    zip(strict=...), so two sequences that must pair up never get cut short silently."""
    ruff = BIN / "ruff"
    if not ruff.exists():
        pytest.fail(f"{ruff} is missing: it is pinned in requirements/lock.txt (make setup installs it)")
    proc = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("target", ["status", "estimate"])
def test_status_and_estimate_install_the_venv_where_missing_and_never_update_it(tmp_path, target):
    """`watch make status` beside running jobs must not pip-reinstall the venv under them
    (lock.txt or pyproject.toml newer than it) nor check for graphviz; a fresh checkout
    still gets its venv."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "requirements").mkdir()

    def dry_run() -> str:
        return subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    (tmp_path / "requirements/lock.txt").write_text("")
    (tmp_path / "pyproject.toml").write_text("")
    assert "pip install" in dry_run()  # no venv yet: installed
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv/.installed").write_text("")
    os.utime(tmp_path / ".venv/.installed", (1, 1))  # older than the lock file
    out = dry_run()
    assert "pip" not in out and "dot" not in out and f"shardflow.cli {target}" in out


# Variables every run target reads, named once in the Makefile's help rather than in each usage.
COMMON_MAKE_VARIABLES = {"BIN", "SNAKEMAKE", "CORES"}


@pytest.mark.parametrize("target", ["evaluate-beir", "evaluate-summaries"])
def test_a_targets_usage_names_every_variable_it_reads_and_the_readme_gives(tmp_path, target):
    """`make <target>` without DATA= prints the usage: it named neither DROP_IDENTICAL_IDS
    (evaluate-beir) nor REFERENCE_FORMAT and STORED (evaluate-summaries), which the recipe
    reads and the README's commands give, so the message was no guide to what it accepts."""
    makefile = (REPO / "Makefile").read_text()
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    proc = subprocess.run(  # -o setup: the usage only, no venv
        ["make", "--no-print-directory", "-o", "setup", target], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.startswith(f"usage: make {target} DATA="), proc.stderr
    usage = set(re.findall(r"\b([A-Z][A-Z_]*)=", proc.stderr))
    recipe = re.search(rf"^{target}: setup\n((?:\t.*\n)+)", makefile, flags=re.M).group(1)
    read = set(re.findall(r"\$\(([A-Z][A-Z_]*)\)|\$\$\{([A-Z][A-Z_]*)", recipe)) - {("", "")}
    read = {a or b for a, b in read} - COMMON_MAKE_VARIABLES
    readme = (REPO / "README.md").read_text()
    lines = re.findall(rf"^make {target} (.*)$", readme, flags=re.M)
    given = {name for line in lines for name in re.findall(r"\b([A-Z][A-Z_]*)=", line)}
    assert read - usage == set() and given - usage == set(), proc.stderr


@pytest.mark.parametrize(
    "command",
    [["reproduce-arguana", "ARGUANA"], ["reproduce-shakespeare", "TINYSHAKESPEARE"], ["sweep NAME=cnndm-lead-k", "CNNDM"]],
)
def test_a_target_without_its_data_names_the_variable_that_gives_it(tmp_path, command):
    """In a clone without ../shared, `make reproduce-arguana` (as the README types it) ended
    in Snakemake's traceback from the parse, naming neither the target nor ARGUANA=; the
    reproductions now stop as `make sweep` does."""
    words, variable = command
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    shutil.copytree(REPO / "config" / "sweeps", tmp_path / "config" / "sweeps")
    missing = tmp_path / "no-data"
    proc = subprocess.run(  # -o setup: no venv; the check comes before Snakemake
        ["make", "--no-print-directory", "-o", "setup", *words.split(), f"{variable}={missing}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"make {words}: no data at {missing}; give it: make {words} {variable}=<path>\n" in proc.stderr


def test_torch_index_installs_the_locks_torch_from_that_index_first(tmp_path):
    """PyPI's torch for Linux is the CUDA build (about 5 GB of NVIDIA libraries): `make run
    TORCH_INDEX=<CPU index>` installs the lock's version from there before the lock, whose
    pin it then meets; without it the install is the lock alone, and an exported
    TORCH_INDEX is not read (a variable of the command line, as the targets' are)."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements/lock.txt").write_text("numpy==2.3.0\ntorch==2.13.0\n")
    (tmp_path / "pyproject.toml").write_text("")

    def recipe(*given: str, **env: str) -> list[str]:
        out = subprocess.run(["make", "-n", *given, ".venv/.installed"], cwd=tmp_path, capture_output=True, text=True,
                             check=True, env={**shell_env(), **env}).stdout
        return [line for line in out.splitlines() if "pip install" in line]

    index = "https://download.pytorch.org/whl/cpu"
    assert recipe(f"TORCH_INDEX={index}")[1:3] == [
        f".venv/bin/pip install --quiet --no-compile --index-url {index} torch==2.13.0",
        ".venv/bin/pip install --quiet --no-compile -r requirements/lock.txt",
    ]
    assert not any("index-url" in line for line in recipe() + recipe(TORCH_INDEX=index))


def test_a_targets_variables_come_from_the_command_line_not_the_environment(tmp_path):
    """WSL sets NAME to the host name: `make evaluate-beir DATA=...` wrote its results under
    results/<host>/, and a MODEL exported for another tool replaced the default model."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    data = tmp_path / "scifact"
    data.mkdir()

    def recipe(*given: str) -> str:
        env = {**os.environ, "NAME": "DESKTOP-1234", "MODEL": "/elsewhere/model", "ID": "uuid"}
        return subprocess.run(["make", "-n", "-o", "setup", *given], cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=True).stdout

    beir = recipe("evaluate-beir", f"DATA={data}")
    assert "DESKTOP" not in beir and '--model "default"' in beir and "basename" in beir
    assert 'name="mine"' in recipe("evaluate-beir", f"DATA={data}", "NAME=mine", "MODEL=m")
    summaries = recipe("evaluate-summaries", f"DATA={data}/dev.jsonl")
    assert "DESKTOP" not in summaries and "uuid" not in summaries and '--id "id"' in summaries


def test_make_compare_reads_its_records_from_the_command_line_not_the_environment(tmp_path):
    """A and B are names a shell may well hold (and JSON one a tool may export): with
    them in the environment only, `make compare` prints its usage instead of comparing
    whatever they name; from the command line, they are the records compared."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    env = {**shell_env(), "A": "/env/a.json", "B": "/env/b.json", "JSON": "1"}

    def make(*given: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", *given], cwd=tmp_path,
                              env=env, capture_output=True, text=True)

    proc = make("compare")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: make compare A=<provenance.json> "), proc.stderr
    out = make("-n", "compare", "A=a.json", "B=b.json").stdout
    assert '-m shardflow.cli compare "a.json" "b.json"' in out and "--json" not in out and "/env/" not in out, out
    assert "--json" in make("-n", "compare", "A=a.json", "B=b.json", "JSON=1").stdout
    # JSON=0 (and no, false) printed JSON too, and DRY_RUN=0 made no move: they mean no
    for no in ("0", "no", "false", "FALSE"):
        assert "--json" not in make("-n", "compare", "A=a.json", "B=b.json", f"JSON={no}").stdout, no
        assert "--dry-run" not in make("-n", "sweep-adopt", "SWEEP=s", f"DRY_RUN={no}").stdout, no
    assert "--dry-run" in make("-n", "sweep-adopt", "SWEEP=s", "DRY_RUN=1").stdout


def test_make_search_passes_its_values_as_typed(tmp_path):
    """A query may hold $, quotes, commas and backticks, a path spaces: make expanded `$1`
    (`price $100` searched `price 00`), a double quote broke the shell line, a backtick
    ran. BIN= points at a python that prints the arguments it got."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = {**shell_env(), "Q": "from the environment", "QUERIES": "/env/q.jsonl", "OUT": "/env/out"}

    def make(*given: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "search", f"BIN={fake.parent}",
                               *given], cwd=tmp_path, env=env, capture_output=True, text=True)

    query = "a 12\" pizza for $100, `touch ran` it's"
    proc = make(f"Q={query}", "QUERIES=my queries.jsonl", "OUT=hits out.jsonl", "K=3", "DATASET=my set")
    assert json.loads(proc.stdout) == ["-m", "shardflow.cli", "search", "--query", query, "--queries",
                                       "my queries.jsonl", "--top-k", "3", "--dataset", "my set", "--out",
                                       "hits out.jsonl"], proc.stderr
    assert not (tmp_path / "ran").exists()
    assert json.loads(make("Q=q", "MODEL=/models/moved here").stdout)[-2:] == ["--model", "/models/moved here"]
    assert json.loads(make("QUERIES=q.csv", "ID=qid", "TEXT=the question").stdout)[3:] == [
        "--queries", "q.csv", "--id-field", "qid", "--text-field", "the question"]
    # CONFIG names config files as the other targets take it: several, at spaces
    assert json.loads(make("Q=q", "CONFIG=a.yaml b.yaml").stdout)[-3:] == ["--configfile", "a.yaml", "b.yaml"]
    proc = make()  # nothing to search: the environment's Q and QUERIES are not taken
    assert proc.returncode == 2 and proc.stderr.startswith("usage: make search Q="), proc.stderr


def test_make_hits_passes_its_values_as_typed(tmp_path):
    """Query ids may hold $, quotes and backticks, a data set's name spaces, as make
    search's values: each reaches the CLI as typed, the environment's own QUERY not."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    env = {**shell_env(), "QUERY": "from the environment"}

    def make(*given: str) -> list[str]:
        proc = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "hits", f"BIN={fake.parent}",
                               *given], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    ids = "q$1,\"it's\",`touch ran`"
    assert make(f"QUERY={ids}", "K=3", "DATASET=my set", "JSON=1") == [
        "-m", "shardflow.cli", "hits", "--query", ids, "--top-k", "3", "--dataset", "my set", "--json"]
    assert not (tmp_path / "ran").exists()
    assert make("FIRST=7", "CONFIG=a.yaml b.yaml") == ["-m", "shardflow.cli", "hits", "--first", "7", "--configfile",
                                                        "a.yaml", "b.yaml"]
    assert make() == ["-m", "shardflow.cli", "hits"]  # the environment's QUERY is not taken


def test_estimate_status_and_dag_read_config_and_gpus_from_the_command_line_not_the_environment(tmp_path):
    """CONFIG, GPUS or STORAGE exported for another tool changed what make estimate and
    make status read, without a word: another run's config, another GPU count."""
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    env = {**shell_env(), "CONFIG": "/env/other.yaml", "GPUS": "64", "STORAGE": "s3://env/prefix",
           "GPU_PEAK_TFLOPS": "1", "MFU": "0.9"}

    def recipe(*given: str) -> str:
        return subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", *given], cwd=tmp_path,
                              env=env, capture_output=True, text=True, check=True).stdout

    for target in ("estimate", "status", "dag"):
        out = recipe(target)
        assert "/env/" not in out and "64" not in out and "s3://env" not in out and "0.9" not in out, out
    given = recipe("estimate", "CONFIG=my.yaml", "GPUS=8", "MFU=0.4")
    assert "--configfile my.yaml --gpus 8" in given and "--mfu 0.4" in given, given
    assert "--storage-prefix s3://b/p" in recipe("status", "STORAGE=s3://b/p")


def shell_env() -> dict[str, str]:
    """This environment as a shell has it: not a sub-make of `make test` (MAKELEVEL,
    MAKEFLAGS), which prints "Entering directory" lines and passes the parent's flags on."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def test_the_makefile_uses_no_directive_gnu_make_3_81_lacks(tmp_path):
    """macOS's /usr/bin/make is GNU make 3.81, which has no `undefine` (3.82): with DATA,
    NAME or another target variable in the environment, `$(eval undefine NAME)` stopped
    every target there, `make help` too ("missing separator"). The variables are emptied
    and unexported instead, as 3.81 can, and the targets' defaults still apply."""
    makefile = (REPO / "Makefile").read_text()
    assert not re.search(r"^[^#\n]*\bundefine\b", makefile, flags=re.M)  # a comment may name it
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "show.mk").write_text(
        "show:\n\t@echo \"make:[$(NAME)] $(MODEL) $(METHOD) shell:[$${NAME-unset}]\"\n"
    )
    shell = shell_env()
    env = {**shell, "NAME": "DESKTOP-1234", "MODEL": "/elsewhere/model", "METHOD": "stored"}
    out = subprocess.run(["make", "-f", "Makefile", "-f", "show.mk", "show"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out == "make:[] default lead shell:[unset]\n"
    data = tmp_path / "scifact"
    data.mkdir()
    beir = subprocess.run(["make", "-n", "-o", "setup", "evaluate-beir", f"DATA={data}"], cwd=tmp_path,
                          env={**env, "SPLIT": "train"}, capture_output=True, text=True, check=True).stdout
    assert '--split "test"' in beir and "DESKTOP" not in beir
    beir = subprocess.run(["make", "-n", "-o", "setup", "evaluate-beir", f"DATA={data}", "SPLIT=dev"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, check=True).stdout
    assert '--split "dev"' in beir


def test_no_rule_runs_a_run_block():
    """Snakemake runs a local job's `run:` block in a Snakemake process of its own, which
    parses the whole workflow again: rule sweep_spec's took 1.5 s of CPU per sweep (a
    script job: 0.4 s). Rules run scripts or shell commands."""
    found = [f"{path.relative_to(REPO)}:{n}" for path in sorted((REPO / "rules").glob("*.smk"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if re.match(r"\s*run:\s*$", line)]
    assert found == []


def test_make_setup_names_a_package_module_that_does_not_compile(tmp_path):
    """Every make target runs setup first, which compiles the package's bytecode: a module
    with a syntax error stopped each one (make lint and make test too) with only
    "Error 1", compileall's message naming the file and line sent to /dev/null."""
    import sys

    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "shardflow").mkdir()
    (tmp_path / "shardflow" / "broken.py").write_text("def f(:\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "dot").write_text("#!/bin/sh\n")  # found on the Makefile's PATH: setup installs no graphviz
    (bin_dir / "dot").chmod(0o755)
    shell = shell_env()
    proc = subprocess.run(["make", "-o", ".venv/.installed", "setup"], cwd=tmp_path, env=shell,
                          capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "shardflow/broken.py" in out and "line 1" in out and "SyntaxError" in out, out
