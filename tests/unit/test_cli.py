"""shardflow.cli: the config overlays behind make evaluate-beir / evaluate-summaries."""

import pytest
import yaml

from shardflow.cli import main


def test_beir_overlay_keeps_the_configs_chunk_count_unless_given(tmp_path):
    out = tmp_path / "o.yaml"
    assert main(["beir-config", "--data", str(tmp_path), "--name", "x", "--out", str(out)]) == 0
    overlay = yaml.safe_load(out.read_text())
    assert "n_chunks" not in overlay["retrieval"] and overlay["retrieval"]["path"] == str(tmp_path)
    for given, written in (("3", 3), ("auto", "auto")):
        assert main(["beir-config", "--data", str(tmp_path), "--name", "x", "--chunks", given, "--out", str(out)]) == 0
        assert yaml.safe_load(out.read_text())["retrieval"]["n_chunks"] == written


@pytest.mark.parametrize("bad", ["0", "-2", "many"])
def test_beir_overlay_refuses_a_chunk_count_naming_it(tmp_path, capsys, bad):
    with pytest.raises(SystemExit):
        main(["beir-config", "--data", str(tmp_path), "--name", "x", "--chunks", bad, "--out", str(tmp_path / "o.yaml")])
    assert f"expected a positive integer or auto, got {bad!r}" in capsys.readouterr().err
    assert not (tmp_path / "o.yaml").exists()


def test_beir_overlay_of_a_missing_folder_names_it(tmp_path, capsys):
    assert main(["beir-config", "--data", str(tmp_path / "nope"), "--name", "x", "--out", str(tmp_path / "o.yaml")]) == 2
    assert f"evaluate-beir: DATA={str(tmp_path / 'nope')!r} is not a folder" in capsys.readouterr().err


def test_beir_overlay_split_names_the_splits_the_folder_has(tmp_path, capsys):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n")
    out = tmp_path / "o.yaml"
    assert main(["beir-config", "--data", str(tmp_path), "--name", "x", "--out", str(out)]) == 2
    assert f"{tmp_path}/qrels/test.tsv does not exist (SPLIT=test); this folder's splits: dev, train" in (
        capsys.readouterr().err
    )
    assert main(["beir-config", "--data", str(tmp_path), "--name", "x", "--split", "dev", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["retrieval"]["split"] == "dev"
    for bad in ("", "dev.tsv", "a/b"):
        with pytest.raises(SystemExit):
            main(["beir-config", "--data", str(tmp_path), "--name", "x", "--split", bad, "--out", str(out)])
        assert "expected a split name such as test or dev" in capsys.readouterr().err


def test_summaries_overlay_chunks_empty_means_auto_and_bad_is_refused(tmp_path, capsys):
    data = tmp_path / "a.jsonl"
    data.write_text('{"id": "1", "article": "x", "highlights": "y"}\n')
    out = tmp_path / "o.yaml"
    for given, written in (("", "auto"), ("auto", "auto"), ("2", 2)):
        assert main(["summaries-config", "--data", str(data), "--name", "n", "--chunks", given, "--out", str(out)]) == 0
        assert yaml.safe_load(out.read_text())["n_chunks"] == written
    with pytest.raises(SystemExit):
        main(["summaries-config", "--data", str(data), "--name", "n", "--chunks", "two", "--out", str(out)])
    assert "expected a positive integer or auto, got 'two'" in capsys.readouterr().err



def test_warnings_of_a_metrics_file_go_to_stderr(tmp_path, capsys):
    import json

    path = tmp_path / "m.json"
    path.write_text(json.dumps({"rouge1": 40.0, "warnings": ["100 of 100 summaries look tokenised"]}))
    assert main(["warnings", str(path)]) == 0
    assert capsys.readouterr().err == "warning: 100 of 100 summaries look tokenised\n"
    path.write_text(json.dumps({"rouge1": 40.0}))  # none: nothing printed
    assert main(["warnings", str(path)]) == 0 and capsys.readouterr().err == ""


def test_summaries_overlay_refuses_a_variable_its_method_would_ignore(tmp_path, capsys):
    """STORED= without METHOD=stored scored Lead-3 instead, and MODEL= under lead or stored
    was dropped: each run printed its metrics path as if it had done what was asked."""
    data = tmp_path / "a.jsonl"
    data.write_text('{"id": "1", "article": "x", "highlights": "y"}\n')
    out = tmp_path / "o.yaml"

    def overlay(*args: str) -> int:
        return main(["summaries-config", "--data", str(data), "--name", "n", *args, "--out", str(out)])

    assert overlay("--stored", "system_summaries.*") == 2
    assert capsys.readouterr().err == (
        "evaluate-summaries: STORED='system_summaries.*' is read by METHOD=stored only, and METHOD=lead "
        "makes summaries of its own: add METHOD=stored, or leave STORED out\n"
    )
    for method, stored in (("lead", ""), ("stored", "s")):
        assert overlay("--method", method, "--stored", stored, "--model", "/models/bart") == 2
        assert capsys.readouterr().err == (
            f"evaluate-summaries: MODEL='/models/bart' is read by METHOD=abstractive (its model) and "
            f"METHOD=extractive (its sentence encoder); METHOD={method} loads no model: leave MODEL out\n"
        )
    assert not out.exists()
    assert overlay("--method", "lead", "--model", "default") == 0  # make's MODEL when none is given
    assert "model" not in yaml.safe_load(out.read_text())["summarise"]


def test_summaries_overlay_gives_model_to_extractive_as_its_sentence_encoder(tmp_path):
    """METHOD=extractive MODEL=... set summarise.model, which extractive never reads: its
    sentences were embedded with the default encoder all the same."""
    data = tmp_path / "a.jsonl"
    data.write_text('{"id": "1", "article": "x", "highlights": "y"}\n')
    (tmp_path / "enc").mkdir()
    out = tmp_path / "o.yaml"
    for given, written in ((str(tmp_path / "enc"), str(tmp_path / "enc")), ("org/hub-encoder", "org/hub-encoder")):
        args = ["--method", "extractive", "--model", given, "--out", str(out)]
        assert main(["summaries-config", "--data", str(data), "--name", "n", *args]) == 0
        summarise = yaml.safe_load(out.read_text())["summarise"]
        assert summarise["encoder"] == written and "model" not in summarise
    for given, written in ((str(tmp_path / "enc"), str(tmp_path / "enc")), ("org/bart", "org/bart")):
        args = ["--method", "abstractive", "--model", given, "--out", str(out)]  # a hub name stays a name
        assert main(["summaries-config", "--data", str(data), "--name", "n", *args]) == 0
        assert yaml.safe_load(out.read_text())["summarise"]["model"] == written
    args = ["--method", "extractive", "--out", str(out)]  # none given: the config's encoder
    assert main(["summaries-config", "--data", str(data), "--name", "n", *args]) == 0
    assert "encoder" not in yaml.safe_load(out.read_text())["summarise"]


def test_sweep_adopt_moves_a_renamed_point_and_refuses_while_snakemake_runs(tmp_path, monkeypatch, capsys):
    """The grid gained train.n_layer at the shipped base value (4): the finished lr=0.001
    job is the point lr=0.001__n_layer=4 (shardflow.sweep.adopt, tests/unit/sweep/test_adopt.py)."""
    monkeypatch.chdir(tmp_path)
    grid = {"train.lr": [0.001], "train.n_layer": [4, 8]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"sweeps": {"lr": {
        "stage": "train", "grid": grid, "seeds": [0], "metrics": {"best_val_loss": "min"}}}}))
    (tmp_path / "results/sweeps/lr/lr=0.001/seed=0").mkdir(parents=True)
    (tmp_path / ".snakemake/locks").mkdir(parents=True)
    (tmp_path / ".snakemake/locks/0.input.lock").write_text("x\n")
    assert main(["sweep-adopt", "lr", "--configfile", "c.yaml"]) == 2
    assert "a Snakemake run holds this working directory (.snakemake/locks/ is not empty)" in capsys.readouterr().err
    (tmp_path / ".snakemake/locks/0.input.lock").unlink()
    assert main(["sweep-adopt", "other", "--configfile", "c.yaml"]) == 2
    assert "sweep-adopt: the config has no sweep 'other'; it has: lr\n" in capsys.readouterr().err
    (tmp_path / "config/sweeps").mkdir(parents=True)  # a sweep `make sweep NAME=other` runs
    (tmp_path / "config/sweeps/other.yaml").write_text("sweeps: {}\n")
    assert main(["sweep-adopt", "other", "--configfile", "c.yaml"]) == 2
    assert "it has: lr (config/sweeps/other.yaml defines it: pass --configfile config/sweeps/other.yaml" in (
        capsys.readouterr().err
    )
    assert main(["sweep-adopt", "lr", "--configfile", "c.yaml", "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        "sweep 'lr': lr=0.001 -> lr=0.001__n_layer=4, seed=0: would move results and 0 Snakemake records\n"
        "sweep-adopt: dry run: nothing was moved\n"
    )
    assert main(["sweep-adopt", "lr", "--configfile", "c.yaml"]) == 0
    assert (tmp_path / "results/sweeps/lr/lr=0.001__n_layer=4/seed=0").is_dir()


@pytest.mark.parametrize(("devices", "pinning", "expected"), [("0,1", "auto", 2), ("0,1", "slots", 2), (None, "auto", 8),
                                                              ("0,1", "off", 8)])
def test_estimate_counts_the_gpus_the_slots_let_run_at_once(monkeypatch, devices, pinning, expected):
    """The local profile's pool counts every GPU of the host (it cannot read the workflow
    config), but with pinning the slots let only gpu_jobs.devices' GPUs run jobs at once;
    the others wait for a slot. make estimate and make status counted the host's 8, so
    with devices "0,1" the wall time read a quarter of what the run takes. Pinning off
    takes no slot: the pool is what runs at once."""
    import argparse

    from shardflow.cli import _gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("SHARDFLOW_GPUS", ",".join(str(i) for i in range(8)))
    cfg = {"gpu_jobs": {"device": "auto", "pinning": pinning, "devices": devices}}
    assert _gpus(argparse.Namespace(gpus=None), cfg)[:1] == (expected,)
    assert _gpus(argparse.Namespace(gpus=3), cfg)[0] == 3  # --gpus as given


def test_summaries_overlay_sets_the_stored_summaries_format_for_method_stored_only(tmp_path, capsys):
    """STORED_FORMAT= becomes summarise.stored_format; without METHOD=stored nothing would
    read it, so it is an error there, as STORED= is."""
    data = tmp_path / "a.jsonl"
    data.write_text('{"id": "1", "article": "x", "highlights": "y", "s": "z"}\n')
    out = tmp_path / "o.yaml"
    base = ["summaries-config", "--data", str(data), "--name", "n", "--out", str(out)]
    assert main([*base, "--method", "stored", "--stored", "s", "--stored-format", "prose"]) == 0
    assert yaml.safe_load(out.read_text())["summarise"]["stored_format"] == "prose"
    assert main([*base, "--method", "stored", "--stored", "s"]) == 0  # none given: the config's
    assert "stored_format" not in yaml.safe_load(out.read_text())["summarise"]
    capsys.readouterr()
    assert main([*base, "--stored-format", "prose"]) == 2
    assert capsys.readouterr().err == (
        "evaluate-summaries: STORED_FORMAT='prose' is read by METHOD=stored only, and METHOD=lead "
        "makes summaries of its own: add METHOD=stored, or leave STORED_FORMAT out\n"
    )


def test_hits_takes_query_ids_repeated_or_at_commas_and_first_or_ids_not_both(tmp_path, monkeypatch, capsys):
    """make hits QUERY=a,b passes one --query: its ids split at commas, as repeated
    --query ids are; FIRST= beside them would leave one of the two unread."""
    from shardflow.workflow import search as nearest

    calls = []
    used = {"data_set": "d", "hits_file": "d/search/hits.parquet", "queries": 3, "hits": 30, "k": 10,
            "documents": 9, "similarity": "cosine", "shown": 0, "top_k": None}
    monkeypatch.setattr(nearest, "stored_hits", lambda folder, **kw: calls.append((folder, kw)) or ([], used))
    base = ["hits", "--results", str(tmp_path), "--dataset", "d"]
    assert main([*base, "--query", "a,b", "--query", "c", "--top-k", "3"]) == 0
    assert calls.pop() == (str(tmp_path / "d"), {"query_ids": ["a", "b", "c"], "first": None, "top_k": 3})
    assert main([*base, "--first", "2"]) == 0
    assert calls.pop() == (str(tmp_path / "d"), {"query_ids": [], "first": 2, "top_k": None})
    capsys.readouterr()
    assert main([*base, "--query", "a", "--first", "2"]) == 2 and not calls
    assert capsys.readouterr().err == "hits: give --query or --first, not both\n"
    assert main([*base, "--query", " , "]) == 2 and not calls
    assert "hits: --query ' , ' names no query id" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--first", "0"])
    assert "expected a positive integer, got '0'" in capsys.readouterr().err
