"""The shipped runs on ArguAna share a results folder only where their jobs run alike.

`make reproduce-arguana`, `make sweep NAME=arguana-max-length` and `make evaluate-beir
DATA=<...>/arguana` each write the retrieval data set results/<retrieval.name>/. Two runs
whose jobs record other settings (params) or read another spelling of the source folder
(the input set) in one folder rerun each other's jobs, every time one follows the other,
and each overwrites the other's outputs. Configs are resolved as the Makefile targets
resolve them (the shipped config, then --configfile, then --config), without data.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from shardflow.cli import main
from shardflow.core.config import canonical_order, load_schema, recorded, validate_config
from shardflow.workflow import plan
from tests.conftest import REPO

MAKEFILE = (REPO / "Makefile").read_text()
# The data the opt-in targets read by default (`ARGUANA ?= ...`): never read here.
ARGUANA = re.search(r"^ARGUANA \?= (.+)$", MAKEFILE, re.M).group(1).strip()


def _yaml(path) -> dict:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def _resolved(shipped_config, *overlays) -> dict:
    cfg = copy.deepcopy(shipped_config)
    for overlay in overlays:
        update_config(cfg, copy.deepcopy(overlay))
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    validate_config(cfg, schema)
    canonical_order(cfg, shipped_config, schema)
    return cfg


def _what_its_jobs_record(cfg: dict) -> dict:
    """What the retrieval data set's jobs record or read, key by key (rules/split.smk,
    embed.smk, retrieval.smk): the split, the embedding section, the device, and the
    retrieval section with its path as written (another spelling is another input set)."""
    split = dataclasses.asdict(plan.datasets(cfg)[plan.retrieval_name(cfg)])
    sections = {
        "split": split,
        "embedding": recorded("embedding", cfg["embedding"]),
        "gpu_jobs": {"device": cfg["gpu_jobs"]["device"]},
        "retrieval": cfg["retrieval"],
    }
    return {f"{section}.{key}": value for section, values in sections.items() for key, value in values.items()}


@pytest.fixture
def arguana_runs(shipped_config, tmp_path) -> dict[str, dict]:
    """Each target's resolved config, the data at the Makefile's default place."""
    data = {"retrieval": {"path": ARGUANA}}  # --config 'retrieval={path: "$(ARGUANA)"}'
    folder = tmp_path / os.path.basename(ARGUANA)  # evaluate-beir's NAME: the folder's name
    folder.mkdir()
    overlay = tmp_path / "beir.yaml"
    assert main(["beir-config", "--data", str(folder), "--name", folder.name, "--out", str(overlay)]) == 0
    reproduction = _yaml(REPO / "config/reproduce/arguana-minilm.yaml")
    sweep = _yaml(REPO / "config/sweeps/arguana-max-length.yaml")
    return {
        "reproduce-arguana": _resolved(shipped_config, reproduction, data),
        "sweep NAME=arguana-max-length": _resolved(shipped_config, sweep, data),
        "evaluate-beir DATA=.../arguana": _resolved(shipped_config, _yaml(overlay)),
    }


def test_runs_in_one_results_folder_record_the_same_settings(arguana_runs):
    # The sweep shares the reproduction's folder (its split chunks, queries and qrels):
    # one pair, at least, is compared.
    names = {target: plan.retrieval_name(cfg) for target, cfg in arguana_runs.items()}
    assert names["sweep NAME=arguana-max-length"] == names["reproduce-arguana"]
    for (a, cfg_a), (b, cfg_b) in itertools.combinations(arguana_runs.items(), 2):
        if plan.retrieval_name(cfg_a) != plan.retrieval_name(cfg_b):
            continue
        rec_a, rec_b = _what_its_jobs_record(cfg_a), _what_its_jobs_record(cfg_b)
        differ = {k: (rec_a[k], rec_b[k]) for k in rec_a if rec_a[k] != rec_b[k]}
        assert not differ, f"make {a} and make {b} both write results/{plan.retrieval_name(cfg_a)}/: {differ}"


def test_the_reproduction_keeps_fp32_in_a_folder_of_its_own(arguana_runs):
    """MTEB's number is an fp32 run (config/reproduce/arguana-minilm.yaml); a BEIR
    evaluation computes in `auto` (bf16 on CUDA), so they cannot share embeddings."""
    repro, beir = arguana_runs["reproduce-arguana"], arguana_runs["evaluate-beir DATA=.../arguana"]
    assert repro["embedding"]["dtype"] == "float32" and beir["embedding"]["dtype"] == "auto"
    assert plan.retrieval_name(repro) != plan.retrieval_name(beir)


def test_the_makefile_targets_the_reproduction_configs_folder(arguana_runs):
    name = plan.retrieval_name(arguana_runs["reproduce-arguana"])
    target = re.search(r"^reproduce-arguana:.*?\n\n", MAKEFILE, re.M | re.S).group(0)
    assert re.findall(r"results/([^/\s]+)/", target) == [name, name], target
