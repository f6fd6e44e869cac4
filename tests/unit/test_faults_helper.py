"""tests.support.faults.rule_of, which names the rule of each job the fault matrix's
watcher finds: a job it misnames gets another rule's fault, and its own is never injected."""

import pickle
import types

from tests.support.faults import rule_of


def _script_job(tmp_path, rule: str) -> list[str]:
    """The command line of a `script:` job: Snakemake's copy of the script, whose
    preamble holds the pickled `snakemake` object."""
    scripts = tmp_path / ".snakemake" / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    script = scripts / f"tmp{rule}.job.py"
    payload = pickle.dumps(types.SimpleNamespace(rule=rule))
    script.write_text(f"import pickle\nsnakemake = pickle.loads({payload!r})\n")
    return ["python", str(script)]


def test_each_split_of_a_data_set_is_the_split_and_split_source_is_itself(tmp_path):
    assert rule_of(_script_job(tmp_path, "split_fm"), {}) == "split"
    assert rule_of(_script_job(tmp_path, "split_source"), {}) == "split_source"
    assert rule_of(_script_job(tmp_path, "collect_sweep_lr"), {}) == "collect_sweep_lr"


def test_a_train_job_under_results_sweeps_is_sweep_train():
    def launch(out: str) -> list[str]:
        return ["python", "-m", "shardflow.train.launch", "--gpus", "0", "--job", f"train {out}", "--",
                "--data", "results/fm/shards", "--out", out, "--resume-dir", "/v/train"]

    assert rule_of(launch("results/fm/train"), {}) == "train"
    assert rule_of(launch("results/sweeps/lr/lr=0.001/seed=0/train"), {}) == "sweep_train"
    assert rule_of(["python", "-m", "shardflow.train.launch"], {}) == "train"
