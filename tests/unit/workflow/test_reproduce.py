"""workflow.reproduce: a pinned experiment's expectations against a run's provenance."""

from __future__ import annotations

import pytest

from shardflow.workflow.reproduce import ReproductionError, check_reproduction


def _sha(c: str) -> str:
    return c * 64


def test_a_pinned_file_is_found_where_the_workflows_own_copy_has_the_same_name():
    """A BEIR folder's corpus.jsonl is recorded after the split's source, the copy
    retrieval_prepare writes as results/<name>/retrieval/corpus.jsonl: the pin names the
    user's file, whose bytes are the pinned ones. It was compared with the copy alone
    (the first input whose path ends so) and failed."""
    inputs = {
        "results/scifact/retrieval/corpus.jsonl": _sha("a"),  # the split's source: the prepared copy
        "results/scifact/chunks/chunk_000.jsonl": _sha("b"),
        "../data/scifact/corpus.jsonl": _sha("c"),  # the user's files, hashed by provenance itself
        "../data/scifact/queries.jsonl": _sha("d"),
    }
    expect = {"data_sha256": {"corpus.jsonl": _sha("c"), "queries.jsonl": _sha("d")}}
    rows = check_reproduction(expect, {"inputs": inputs}, None)
    assert [(r.item, r.status) for r in rows] == [("data corpus.jsonl", "ok"), ("data queries.jsonl", "ok")]
    # Other bytes under that name than the pin's still fail.
    (row,) = check_reproduction({"data_sha256": {"corpus.jsonl": _sha("e")}}, {"inputs": inputs}, None)
    assert row.status == "FAIL"


def test_a_pinned_file_in_a_dot_folder_is_found_by_its_own_name():
    """The pin's leading `./` was dropped with str.lstrip, which strips characters, not a
    prefix: `.cache/corpus.jsonl` was looked for as `cache/corpus.jsonl`, missed the input
    recorded as `data/.cache/corpus.jsonl`, and failed as missing."""
    inputs = {"data/.cache/corpus.jsonl": _sha("c"), "data/cache/corpus.jsonl": _sha("e")}
    for pin in (".cache/corpus.jsonl", "./.cache/corpus.jsonl"):
        (row,) = check_reproduction({"data_sha256": {pin: _sha("c")}}, {"inputs": inputs}, None)
        assert (row.got, row.status) == (_sha("c")[:16], "ok"), pin


def test_a_metric_that_fails_beyond_five_decimals_shows_the_digits_that_differ():
    """Values print with 5 decimals; under a tolerance below 1e-5 a failing row read
    0.50000 expected and 0.50000 got. Such a row shows each value in full; every other
    row reads as before."""
    expect = {"metrics": {"a": {"value": 0.5, "tolerance": 1e-7}, "b": {"value": 0.25, "tolerance": 0.001}}}
    rows = check_reproduction(expect, {}, {"a": 0.5000004, "b": 0.2500004})
    assert [(r.expected, r.got, r.status) for r in rows] == [("0.5", "0.5000004", "FAIL"), ("0.25000", "0.25000", "ok")]


def test_a_nested_metric_is_read_by_the_dotted_name_the_parse_time_check_accepts():
    """plan.unknown_reproduction_metrics accepts the names a stage's record holds as the
    sweeps name them, nested ones joined with '.' (`all.ndcg_at_1` of the retrieval
    record, `systems.lead.rouge1.mean`, `bootstrap.seed`); the check looked up the whole
    name at the top level, found nothing, and failed the row after every job had run."""
    metrics = {"ndcg_at_10": 0.5, "all": {"ndcg_at_1": 0.25}, "systems": {"lead": {"rouge1": {"mean": 0.4}}}}
    expect = {
        "metrics": {
            "all.ndcg_at_1": {"value": 0.25, "tolerance": 0.001},
            "ndcg_at_10": {"value": 0.5, "tolerance": 0.001},
            "systems.lead.rouge1.mean": {"value": 0.4, "tolerance": 0.001},
        }
    }
    rows = check_reproduction(expect, {}, metrics)
    assert [(r.item, r.got, r.status) for r in rows] == [
        ("metric all.ndcg_at_1", "0.25000", "ok"),
        ("metric ndcg_at_10", "0.50000", "ok"),
        ("metric systems.lead.rouge1.mean", "0.40000", "ok"),
    ]
    # A name that stops at a group, or goes on past a number, is no metric: its row fails.
    expect = {"metrics": {name: {"value": 0.4, "tolerance": 1} for name in ("systems.lead", "ndcg_at_10.mean")}}
    assert [r.status for r in check_reproduction(expect, {}, metrics)] == ["FAIL", "FAIL"]


def test_a_key_holding_a_dot_is_read_by_its_own_name_and_two_readings_are_an_error():
    """A summarisation system "gpt-3.5" (method stored, a key of the input's object of
    summaries) is one key of the record: `systems.gpt-3.5.rouge1.mean` was split at every
    dot, found no key "gpt-3", and failed its row after every job had run. The name is
    read against the record's keys; where a key with a dot and the nested keys both read
    it, which one the check compares is a guess, so it stops naming both."""
    metrics = {"systems": {"gpt-3.5": {"rouge1": {"mean": 0.4}}, "lead": {"rouge1": {"mean": 0.3}}}}
    expect = {
        "metrics": {
            "systems.gpt-3.5.rouge1.mean": {"value": 0.4, "tolerance": 0.001},
            "systems.lead.rouge1.mean": {"value": 0.3, "tolerance": 0.001},
        }
    }
    rows = check_reproduction(expect, {}, metrics)
    assert [(r.item, r.got, r.status) for r in rows] == [
        ("metric systems.gpt-3.5.rouge1.mean", "0.40000", "ok"),
        ("metric systems.lead.rouge1.mean", "0.30000", "ok"),
    ]
    # An unknown name fails its row as before: nothing is read.
    (row,) = check_reproduction(
        {"metrics": {"systems.gpt-3.6.rouge1.mean": {"value": 0.4, "tolerance": 1}}}, {}, metrics
    )
    assert (row.got, row.status) == ("missing", "FAIL")
    # Both "gpt-3.5" and "gpt-3" -> "5" hold rouge1.mean: ambiguous.
    metrics["systems"]["gpt-3"] = {"5": {"rouge1": {"mean": 0.9}}}
    with pytest.raises(ReproductionError) as err:
        check_reproduction(expect, {}, metrics)
    assert str(err.value).startswith(
        "reproduce.expect.metrics: 'systems.gpt-3.5.rouge1.mean' names 2 values of the metrics record: "
        "['systems']['gpt-3.5']['rouge1']['mean'] and ['systems']['gpt-3']['5']['rouge1']['mean']; "
    )
    # A top-level key with a dot beside the nested one it spells, likewise.
    with pytest.raises(ReproductionError, match=r"'a\.b' names 2 values .*\['a\.b'\] and \['a'\]\['b'\]"):
        check_reproduction({"metrics": {"a.b": {"value": 1, "tolerance": 0}}}, {}, {"a.b": 1, "a": {"b": 2}})


def _packages(**versions) -> dict:
    return {"python": "3.11.9", "numpy": "2.4.6", "torch": "2.13.0+cpu", **versions}


def test_a_pinned_package_is_checked_against_the_versions_the_jobs_ran_with():
    """The provenance job records the packages installed when it runs, which can be after
    an upgrade that reran none of the jobs (Snakemake does not track packages; a config or
    provenance script change reruns provenance alone): the embed jobs ran torch 2.12, the
    record said 2.13, and a strict check pinned to 2.13 passed. The jobs' own versions
    (jobs_made_with, as for the model hash) are compared too; every version differing from
    the pin is a drift, named in the row."""
    made = {"jobs": 4, "packages": [_packages(torch="2.12.0+cpu")]}
    manifest = {"packages": _packages(), "jobs_made_with": made}
    expect = {"packages": {"torch": "2.13.0+cpu", "numpy": "2.4.6"}}
    rows = check_reproduction(expect, manifest, None, strict_packages=True)
    assert [(r.item, r.got, r.status) for r in rows] == [
        ("package numpy", "2.4.6", "ok"),
        ("package torch", "2.12.0+cpu (jobs), 2.13.0+cpu (now)", "FAIL"),
    ]
    assert check_reproduction(expect, manifest, None)[1].status == "drift"
    # Jobs that ran two versions (a chunk job rerun after an upgrade): both named.
    made["packages"].append(_packages())
    (row,) = check_reproduction({"packages": {"torch": "2.13.0+cpu"}}, manifest, None, strict_packages=True)
    assert (row.got, row.status) == ("2.12.0+cpu (jobs), 2.13.0+cpu (jobs, now)", "FAIL")
    # One version everywhere, or no job that records what it ran (training): as before.
    made["packages"] = [_packages()]
    (row,) = check_reproduction({"packages": {"torch": "2.13.0+cpu"}}, manifest, None, strict_packages=True)
    assert (row.got, row.status) == ("2.13.0+cpu", "ok")
    (row,) = check_reproduction({"packages": {"torch": "2.13.0+cpu"}}, {"packages": _packages(), "jobs_made_with": None},
                                None, strict_packages=True)
    assert (row.got, row.status) == ("2.13.0+cpu", "ok")


def test_a_metric_exactly_at_its_tolerance_passes_as_written():
    """A tolerance is inclusive, on the numbers as the experiment file and the metrics
    record write them: 0.4 against 0.3 ± 0.1 is within. In binary floating point
    0.4 - 0.3 is 0.10000000000000003, so the row failed with a table showing a value
    inside its tolerance (2 of 5 relevant found: recall 0.4 against a pin of 0.3 ± 0.1)."""
    metrics = {"recall_at_5": 0.4, "ndcg_at_10": 0.50267, "loss": 1.9158, "diverged": float("nan"), "none": None}
    pins = {
        "recall_at_5": (0.3, 0.1, "ok"),
        "ndcg_at_10": (0.50167, 0.001, "ok"),
        "loss": (1.9158, 0, "ok"),
    }
    rows = check_reproduction({"metrics": {n: {"value": v, "tolerance": t} for n, (v, t, _) in pins.items()}}, {}, metrics)
    assert {r.item.removeprefix("metric "): r.status for r in rows} == {n: s for n, (_, _, s) in pins.items()}
    # Past it by the least the records can write, or not a number at all: FAIL.
    pins = {"recall_at_5": (0.3, 0.0999999, "FAIL"), "ndcg_at_10": (0.50166, 0.001, "FAIL"),
            "loss": (1.91580001, 0, "FAIL"), "diverged": (1.9, 1e9, "FAIL"), "none": (1.9, 1e9, "FAIL")}
    rows = check_reproduction({"metrics": {n: {"value": v, "tolerance": t} for n, (v, t, _) in pins.items()}}, {}, metrics)
    assert {r.item.removeprefix("metric "): r.status for r in rows} == {n: s for n, (_, _, s) in pins.items()}
    (row,) = check_reproduction({"metrics": {"x": {"value": 1, "tolerance": 0}}}, {}, {"x": float("inf")})
    assert row.status == "FAIL"


def test_a_package_is_found_however_its_name_is_spelt():
    """Provenance records `sentence-transformers`, `flash-attn` (their distribution names);
    a pin spelt as the module is imported, or as pip freeze may write it
    (`sentence_transformers`, `Flash_Attn`), found nothing: its row read '-' and drifted
    whatever was installed, and failed under strict_packages. Package names are one
    however their case and '-', '_', '.' are written (PEP 503)."""
    manifest = {"packages": _packages(**{"sentence-transformers": "5.1.0", "flash-attn": None})}
    expect = {"packages": {"sentence_transformers": "5.1.0", "Sentence.Transformers": "5.0.0", "Flash_Attn": "2.8"}}
    rows = check_reproduction(expect, manifest, None, strict_packages=True)
    assert [(r.item, r.got, r.status) for r in rows] == [
        ("package Flash_Attn", "-", "FAIL"),  # recorded as not installed
        ("package Sentence.Transformers", "5.1.0", "FAIL"),
        ("package sentence_transformers", "5.1.0", "ok"),
    ]


def test_a_null_metric_reads_null_and_an_absent_one_missing():
    """Both failed rows read `-`: a record that holds the metric as null (a stage that
    could not compute it) and one that lacks it (another stage's record, an older
    writer) are different faults, and the table is what the user reads to tell them."""
    expect = {"metrics": {"a": {"value": 0.5, "tolerance": 0.1}, "b": {"value": 0.5, "tolerance": 0.1}}}
    rows = check_reproduction(expect, {}, {"a": None})
    assert [(r.item, r.got, r.status) for r in rows] == [("metric a", "null", "FAIL"), ("metric b", "missing", "FAIL")]
    (row,) = check_reproduction({"metrics": {"a": {"value": 0.5, "tolerance": 0.1}}}, {}, None)
    assert (row.got, row.status) == ("missing", "FAIL")


def test_a_record_that_is_unreadable_of_another_format_or_missing_a_key_is_refused_naming_the_file(tmp_path):
    """verify_reproduction read the record with no check: one of another format (a later
    writer's, or a file that is no provenance record) was compared key by key as though it
    were this one's, a key missing read as `missing` rows that blamed the run, and a record
    that is no JSON object stopped on an AttributeError naming nothing. Each is one error
    naming the file and what is wrong with it; a whole record is read as written."""
    import json

    from shardflow.workflow.provenance import FORMAT
    from shardflow.workflow.reproduce import read_provenance

    record = {"format": FORMAT, "inputs": {"c.jsonl": _sha("c")}, "outputs": {}, "packages": _packages(),
              "model": None, "jobs_made_with": None, "created_unix": 1.5}
    path = tmp_path / "provenance.json"

    def refused(obj) -> str:
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        with pytest.raises((ReproductionError, ValueError)) as exc:  # ValueError: read_json's, for invalid JSON
            read_provenance(path)
        return str(exc.value)

    path.write_text(json.dumps(record))
    assert read_provenance(path) == record
    message = refused(dict(record, format="shardflow.provenance/2"))
    assert message.startswith(f"{path}: format 'shardflow.provenance/2'") and f"reads '{FORMAT}'" in message
    assert refused({k: v for k, v in record.items() if k != "format"}).startswith(f"{path}: no 'format' key")
    message = refused({k: v for k, v in record.items() if k not in ("inputs", "packages")})
    assert message.startswith(f"{path}: key 'inputs' missing; key 'packages' missing"), message
    assert refused(dict(record, model="abc")).startswith(f"{path}: key 'model' is a string, not an object or null")
    assert refused([record]).startswith(f"{path}: a JSON array, not a provenance record")
    assert refused('{"format": ').startswith(f"{path}:1: ")  # cut short: read_json's own error, with the line
