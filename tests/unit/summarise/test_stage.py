"""The summarisation stage's job-level pieces: chunk jobs for lead/extractive
(resumable), the checked merge, ROUGE evaluation joined by id, the report numbers."""

import json
import logging

import numpy as np
import pytest

from shardflow.core.parts import PartStore
from shardflow.corpus.readers import BadRecordError, ReaderOptions, iter_records
from shardflow.summarise.evaluate import MissingReferenceError, evaluate_summaries, score_stored
from shardflow.summarise.merge import SummariesCheckError, merge_summaries
from shardflow.summarise.params import ScoreParams, SummariseParams
from shardflow.summarise.records import SummariesError, iter_summaries, write_summaries
from shardflow.summarise.report import SummaryReportParams, build_report, run_summary
from shardflow.summarise.select import select_chunk
from tests.support.fake_encoder import CountingEncoder

ARTICLES = [
    "The council met on Monday. It approved the budget. Critics called it rushed. A vote follows.",
    "Rain fell all week. Rivers rose. Two roads closed.",
    "One sentence only.",
]


def write_chunk(path, texts, prefix="doc"):
    path.write_text("".join(json.dumps({"id": f"{prefix}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def test_lead_chunk_job_writes_records_in_order(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ARTICLES)
    out = tmp_path / "out.jsonl"
    stats = select_chunk(chunk, out, SummariseParams(k=2, window=2), tmp_path / "resume")
    rows = list(iter_summaries(out))
    assert [r["id"] for r in rows] == ["doc-0", "doc-1", "doc-2"]
    assert rows[0]["summary"] == "The council met on Monday.\nIt approved the budget."
    assert rows[2]["summary"] == "One sentence only."
    assert rows[0]["input_tokens"] == len(ARTICLES[0].split()) and rows[0]["output_tokens"] == 9
    assert stats["items"] == 3 and stats["resumed_parts"] == 0 and stats["method"] == "lead"
    assert stats["items_generated"] == 3  # lead keeps parts too: its rate counts what it summarised
    assert stats["peak_gpu_mem_mib"] is None and stats["peak_gpu_mem_reserved_mib"] is None  # not on a GPU
    assert not (tmp_path / "resume").exists()  # the parts, and the resume root they left empty


def test_a_chunk_job_whose_snakemake_is_gone_writes_nothing_and_its_rerun_resumes(tmp_path, monkeypatch):
    """As embed: an orphaned job keeps its parts and writes no summaries no Snakemake
    would record (shardflow.core.controller); the rerun resumes from the parts."""
    import os

    from shardflow.core import controller

    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ARTICLES)
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(controller, "find", lambda: controller.Controller(os.getpid(), "another start"))
    with pytest.raises(controller.OrphanedJobError, match="the finished parts are kept in"):
        select_chunk(chunk, out, SummariseParams(k=2, window=2), tmp_path / "resume")
    assert not out.exists()
    import json

    (record,) = (tmp_path / "resume").glob("*/attempt-*.json")  # which job, how far (make status)
    assert {k: json.loads(record.read_text())[k] for k in ("job", "items_saved")} == {"job": str(out), "items_saved": 3}
    monkeypatch.setattr(controller, "find", lambda: None)
    stats = select_chunk(chunk, out, SummariseParams(k=2, window=2), tmp_path / "resume")
    assert stats["resumed_parts"] == 2 and stats["earlier_attempts"] == 1  # the orphaned attempt, from its record
    assert list(stats["earlier_attempt_devices"]) == ["cpu"] and stats["earlier_attempt_seconds"] >= 0
    assert [r["id"] for r in iter_summaries(out)] == ["doc-0", "doc-1", "doc-2"]




def test_extractive_job_resumes_from_finished_parts(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ARTICLES * 2)
    params = SummariseParams(method="extractive", k=2, window=2)
    ref_out = tmp_path / "ref.jsonl"
    select_chunk(chunk, ref_out, params, tmp_path / "ref_resume", encoder=CountingEncoder())
    # A killed run left part 0 behind: the rerun computes parts 1 and 2 only.
    enc = CountingEncoder()
    resume = tmp_path / "resume"
    from shardflow.core.hashing import digest, texts_fingerprint
    from shardflow.core.parts import FORMAT_VERSION, resume_key

    identity = {"format": FORMAT_VERSION, "params": {k: v for k, v in params.__dict__.items() if k != "window"},
                "window": 2, "encoder": {"fake": 1}}
    texts = ARTICLES * 2
    store = PartStore(resume / resume_key(chunk, identity),
                      {"n_texts": 6, "texts_sha256": texts_fingerprint(texts), "identity": digest(identity)}).open()
    first = [dict(r, id=None) for r in iter_summaries(ref_out)][:2]
    store.save_records(0, [{k: r[k] for k in ("summary", "input_tokens", "output_tokens", "truncated")} for r in first])
    out = tmp_path / "out.jsonl"
    stats = select_chunk(chunk, out, params, resume, encoder=enc)
    assert stats["resumed_parts"] == 1
    assert out.read_bytes() == ref_out.read_bytes()
    assert enc.calls == sum(len(a.split(". ")) for a in texts[2:] if len(a.split(". ")) > 2)  # docs > k sentences only
    # Its rate counts the 4 documents it summarised, not the 2 its parts resumed.
    assert stats["items"] == 6 and stats["items_generated"] == 4
    assert stats["items_per_s"] == pytest.approx(4 / stats["seconds"])


def test_an_extractive_job_records_the_peak_gpu_memory_of_its_encoders_device(tmp_path, monkeypatch):
    """Counted from the call on (the loaded encoder's weights are on the GPU by then) on the
    encoder's device. No GPU here: the core.devices calls are replaced and recorded."""
    from shardflow.summarise import select

    class GpuEncoder(CountingEncoder):
        device = "cuda:0"

    events = []
    monkeypatch.setattr(select, "reset_peak_memory", lambda device: events.append(("reset", device)))
    monkeypatch.setattr(select, "peak_memory", lambda device: events.append(("peak", device))
                        or {"peak_gpu_mem_mib": 300.0, "peak_gpu_mem_reserved_mib": 512.0})
    params = SummariseParams(method="extractive", k=2, window=2)
    stats = select_chunk(write_chunk(tmp_path / "c.jsonl", ARTICLES), tmp_path / "o.jsonl", params, tmp_path / "r",
                         encoder=GpuEncoder())
    assert events == [("reset", "cuda:0"), ("peak", "cuda:0")] and stats["device"] == "cuda:0"
    assert (stats["peak_gpu_mem_mib"], stats["peak_gpu_mem_reserved_mib"]) == (300.0, 512.0)


def test_merge_checks_count_and_ids(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rec = {"summary": "s", "input_tokens": 3, "output_tokens": 1, "truncated": False}
    write_summaries(a, ["x", "y"], [rec, rec])
    write_summaries(b, ["z"], [rec])
    out = tmp_path / "all.jsonl"
    assert merge_summaries([str(a), str(b)], out, 3)["records"] == 3
    assert out.read_bytes() == a.read_bytes() + b.read_bytes()
    with pytest.raises(SummariesCheckError, match=r"count: .*'records': 3, 'expected': 4"):
        merge_summaries([str(a), str(b)], tmp_path / "bad.jsonl", 4)
    write_summaries(b, ["x"], [rec])
    with pytest.raises(SummariesCheckError, match=r"ids_unique: .*'examples': \['x'\]"):
        merge_summaries([str(a), str(b)], tmp_path / "bad.jsonl", 3)
    assert not (tmp_path / "bad.jsonl").exists()
    b.write_text('{"id": "q", "summary": "s"}\n')
    with pytest.raises(SummariesError, match=r"b.jsonl:1: missing input_tokens, output_tokens, truncated"):
        merge_summaries([str(a), str(b)], tmp_path / "bad.jsonl", 3)
    # not UTF-8, or not an object: a bare UnicodeDecodeError or TypeError named no file
    for line, reason in ((b'{"id": "q\xe9"}', "invalid UTF-8 at byte 9 of the line"), (b"5", "JSON value is int")):
        b.write_bytes(line + b"\n")
        with pytest.raises(SummariesError, match=rf"b.jsonl:1: {reason}"):
            merge_summaries([str(a), str(b)], tmp_path / "bad.jsonl", 3)


def test_merge_names_the_file_and_line_of_a_null_id(tmp_path):
    # The duplicate check hashed the id and raised a bare AttributeError, naming no file.
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rec = {"summary": "s", "input_tokens": 3, "output_tokens": 1, "truncated": False}
    write_summaries(a, ["x", "y"], [rec, rec])
    b.write_text(json.dumps({"id": "q", **rec}) + "\n" + json.dumps({"id": None, **rec}) + "\n")
    with pytest.raises(SummariesError, match=r"b.jsonl:2: id is null, not a string"):
        merge_summaries([str(a), str(b)], tmp_path / "all.jsonl", 4)
    assert not (tmp_path / "all.jsonl").exists()


def test_evaluation_joins_references_by_id_and_names_what_is_missing(tmp_path):
    src = tmp_path / "src.jsonl"
    src.write_text(
        json.dumps({"id": "a", "article": "x", "highlights": "The council approved the budget."}) + "\n"
        + json.dumps({"id": "b", "article": "y", "highlights": "Rivers rose and roads closed."}) + "\n"
    )
    summaries = tmp_path / "s.jsonl"
    rec = {"input_tokens": 10, "output_tokens": 5, "truncated": False}
    write_summaries(summaries, ["b", "a", "c"], [
        dict(rec, summary="Rivers rose.\nTwo roads closed."), dict(rec, summary="The council approved the budget."),
        dict(rec, summary="unreferenced"),
    ])
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    with pytest.raises(MissingReferenceError, match=r"1 summarised documents have no usable reference .*\['c'\]"):
        evaluate_summaries(str(summaries), [str(src)], ScoreParams(), outputs)
    scored = evaluate_summaries(str(summaries), [str(src)], ScoreParams(on_bad_record="skip"), outputs, system="lead")
    m = scored.metrics
    assert m["n_documents"] == 2 and m["documents_without_reference"] == 1
    assert m["systems"]["lead"]["rouge1"]["n"] == 2
    assert m["rouge1"] > 50  # doc a is a perfect match
    assert m["compression_ratio_mean"] == pytest.approx(0.5)


def test_stored_scoring_names_each_record_it_sets_aside_in_the_log(tmp_path, caplog):
    src = tmp_path / "src.jsonl"
    good = {"id": "a", "article": "x", "highlights": "The council approved the budget.", "summary": "The council met."}
    src.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, id="b", summary=None)) + "\n")
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    with caplog.at_level(logging.WARNING):
        scored = score_stored([str(src)], "summary", ScoreParams(on_bad_record="skip"), outputs)
    assert scored.metrics["rejected_records"] == 1 and scored.metrics["n_documents"] == 1
    assert f"record set aside: {src}:2: field 'summary' is NoneType, not a string" in caplog.text


def test_stored_files_are_one_input_an_id_in_two_is_a_duplicate(tmp_path):
    """A corpus in several files (an overlapping re-export): doc a in both was scored
    twice, n 3 beside n_documents 2, its score weighing double in the means. Now the
    second is a duplicate naming the first's file and line, or, skipped, a reject."""
    rec = {"id": "a", "article": "x", "highlights": "The council approved the budget.", "summary": "The council met."}
    first, second = tmp_path / "part-0.jsonl", tmp_path / "part-1.jsonl"
    first.write_text(json.dumps(rec) + "\n" + json.dumps(dict(rec, id="b", summary="Rivers rose.")) + "\n")
    second.write_text(json.dumps(dict(rec, id="c")) + "\n" + json.dumps(rec) + "\n")
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    sources = [str(first), str(second)]
    with pytest.raises(BadRecordError, match=rf"part-1.jsonl:2: duplicate id 'a' \(first at {first}:1\)"):
        score_stored(sources, "summary", ScoreParams(), outputs)
    m = score_stored(sources, "summary", ScoreParams(on_bad_record="skip"), outputs).metrics
    assert m["n_documents"] == 3 and m["systems"]["summary"]["rouge1"]["n"] == 3 and m["rejected_records"] == 1


def test_stored_systems_are_the_set_most_records_of_all_files_hold(tmp_path):
    """Each file's systems had been decided alone: a file with {bart, t5} beside one with
    {bart, pegasus} scored pegasus and t5 on different documents, side by side in one
    table. The set is decided over every file, and a record that differs from it is named."""
    rec = {"id": "a", "highlights": "The council approved the budget.", "s": {"bart": "The council met.", "pegasus": "x y"}}
    first, second = tmp_path / "part-0.jsonl", tmp_path / "part-1.jsonl"
    first.write_text(json.dumps(rec) + "\n" + json.dumps(dict(rec, id="b")) + "\n")
    second.write_text(json.dumps(dict(rec, id="c", s={"bart": "Rivers rose.", "t5": "Roads closed."})) + "\n")
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    sources = [str(first), str(second)]
    differ = r"part-1.jsonl:1: systems in 's' differ .* missing \['pegasus'\], extra \['t5'\]"
    with pytest.raises(BadRecordError, match=differ):
        score_stored(sources, "s.*", ScoreParams(), outputs)
    m = score_stored(sources, "s.*", ScoreParams(on_bad_record="skip"), outputs).metrics
    assert {name: s["rouge1"]["n"] for name, s in m["systems"].items()} == {"bart": 2, "pegasus": 2}
    assert m["n_documents"] == 2 and m["rejected_records"] == 1


def test_a_reference_comes_from_the_line_the_split_kept(tmp_path, caplog):
    """Duplicate ids, skipped: the split keeps d1's line 2 (line 1's text is empty) and
    d2's line 3 (line 4 repeats the id). Each reference is read from the kept line: d1's
    own, and none for d2 (line 3 has none), not line 4's, another article's."""
    src = tmp_path / "src.jsonl"
    rows = [
        {"id": "d1", "article": "", "highlights": "The striker scored twice."},
        {"id": "d1", "article": "A cat slept.", "highlights": "A cat slept all day."},
        {"id": "d2", "article": "Markets fell."},
        {"id": "d2", "article": "Other news.", "highlights": "Markets fell sharply on Monday."},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    split_rejects = tmp_path / "rejects.jsonl"
    split_rejects.write_text(
        json.dumps({"source": str(src), "line": 1, "reason": "empty text", "raw": ""}) + "\n"
        + json.dumps({"source": str(src), "line": 4, "reason": "duplicate id 'd2'", "raw": ""}) + "\n"
    )
    summaries = tmp_path / "s.jsonl"
    rec = {"input_tokens": 3, "output_tokens": 3, "truncated": False}
    write_summaries(summaries, ["d1", "d2"], [dict(rec, summary="A cat slept."), dict(rec, summary="Markets fell.")])
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    with caplog.at_level(logging.WARNING):
        scored = evaluate_summaries(str(summaries), [str(src)], ScoreParams(on_bad_record="skip"), outputs,
                                    system="lead", split_rejects=str(split_rejects))
    m = scored.metrics
    assert m["n_documents"] == 1 and m["documents_without_reference"] == 1 and m["rejected_references"] == 1
    assert m["split_rejected_records"] == 2  # lines 1 and 4: in metrics.json, not only in the split's rejects
    assert m["rouge1"] > 50  # d1 against its own reference, not the football one
    assert any("src.jsonl:3: missing field 'highlights'" in r.getMessage() for r in caplog.records)


def test_report_numbers_from_the_job_table():
    stats = [
        {"items": 10, "input_tokens": 1000, "output_tokens": 100, "truncated": 1, "start_time": 0.0, "end_time": 10.0,
         "seconds": 9.0, "device": "cuda:0"},
        {"items": 5, "input_tokens": 500, "output_tokens": 50, "truncated": 0, "start_time": 2.0, "end_time": 20.0,
         "seconds": 17.0, "device": "cuda:0"},
    ]
    lengths = np.array([[100, 10]] * 15)  # the 15 documents' (input, summary) tokens
    s = run_summary(
        stats, [{"s": 3600.0}, {"s": 1800.0}], {"rejected_records": 2}, SummaryReportParams(gpu_hour_price=2.0), lengths
    )
    assert (s["records"], s["rejected_records"], s["truncated_inputs"]) == (15, 2, 1)
    assert s["compression_ratio"] == pytest.approx(0.1)
    assert s["gpu_hours"] == pytest.approx(1.5) and s["estimated_cost"] == pytest.approx(3.0)
    assert s["items_per_s"] == pytest.approx(15 / 20)
    # A killed attempt on another GPU before the first job's last: summary.json lists its
    # device and its seconds by device, next to the GPU-hours it adds.
    stats[0] |= {"earlier_attempts": 1, "earlier_attempt_seconds": 900.0, "earlier_attempt_devices": {"cuda:1": 900.0}}
    s = run_summary(stats, [{"s": 3600.0}, {"s": 1800.0}], {}, SummaryReportParams(gpu_hour_price=2.0), lengths)
    assert s["devices"] == ["cuda:0"] and s["earlier_attempt_devices"] == {"cuda:1": 900.0}
    assert s["gpu_hours"] == pytest.approx(1.75)
    # Stats from before jobs recorded peak GPU memory: none, and both CUDA jobs counted as unrecorded.
    assert (s["peak_gpu_mem_mib"], s["peak_gpu_mem_unrecorded"]) == (None, 2)
    # The largest job's peak, and its chunk.
    for i, (allocated, reserved) in enumerate([(500.0, 800.0), (650.0, 700.0)]):
        stats[i] |= {"chunk": i, "peak_gpu_mem_mib": allocated, "peak_gpu_mem_reserved_mib": reserved}
    s = run_summary(stats, [{"s": 3600.0}, {"s": 1800.0}], {}, SummaryReportParams(), lengths)
    assert (s["peak_gpu_mem_mib"], s["peak_gpu_mem_reserved_mib"], s["peak_gpu_mem_chunk"]) == (650.0, 800.0, 1)


def test_report_totals_count_every_document_whatever_a_job_resumed(tmp_path):
    """An abstractive job's stats count the tokens of the texts it generated, not of those
    its parts resumed (its rates' numerators): a job killed after its last part and rerun
    counts none. summary.json's totals come from the summaries, so they do not depend on
    whether a job was killed."""
    rows = [(f"doc-{i}", 100 + i, 10 + i) for i in range(4)]
    summaries = tmp_path / "summaries.jsonl"
    write_summaries(
        summaries, [r[0] for r in rows],
        [{"summary": "s", "input_tokens": inp, "output_tokens": out, "truncated": False} for _, inp, out in rows],
    )
    stats = [  # chunk 0 ran whole; chunk 1 resumed all its parts (items_generated 0)
        {"chunk": 0, "items": 2, "items_generated": 2, "input_tokens": 201, "output_tokens": 21, "truncated": 0,
         "items_per_s": 0.2, "start_time": 0.0, "end_time": 10.0, "seconds": 10.0, "device": "cpu"},
        {"chunk": 1, "items": 2, "items_generated": 0, "input_tokens": 0, "output_tokens": 0, "truncated": 0,
         "items_per_s": 0.0, "start_time": 10.0, "end_time": 11.0, "seconds": 1.0, "device": "cpu"},
    ]
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [{"stats": s, "benchmark": {"s": s["seconds"]}} for s in stats]}))
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"total_records": 4}))
    outputs = {k: str(tmp_path / f"{k}.png") for k in ("throughput", "timeline", "lengths")}
    outputs["summary"] = str(tmp_path / "summary.json")
    s = build_report(str(jobs), str(manifest), str(summaries), outputs, SummaryReportParams())
    assert (s["records"], s["input_tokens"], s["summary_tokens"]) == (4, 406, 46)
    assert s["compression_ratio"] == round(46 / 406, 6)
    # The rate is over the documents the jobs summarised (2 in 11 s of wall time), as the
    # embedding report's: chunk 1's resumed documents took its killed attempt's time.
    assert (s["records_resumed"], s["items_per_s"]) == (2, round(2 / 11, 3))
    assert json.loads((tmp_path / "summary.json").read_text())["summary_tokens"] == 46
    assert s["length_unit"] == "tokens"  # an abstractive job's stats name no method: a model's tokens
    lead = [{**st, "method": "lead"} for st in stats]
    jobs.write_text(json.dumps({"jobs": [{"stats": st, "benchmark": {"s": st["seconds"]}} for st in lead]}))
    assert build_report(str(jobs), str(manifest), str(summaries), outputs, SummaryReportParams())["length_unit"] == (
        "words")  # lead and extractive count whitespace-separated words


def test_without_an_id_field_references_join_by_source_position(tmp_path):
    """input.id_field: null: the split names records <path>:<line>; the references too."""
    src = tmp_path / "src.jsonl"
    src.write_text(json.dumps({"article": "x", "highlights": "The council approved the budget."}) + "\n\n"
                   + json.dumps({"article": "y", "highlights": "Rivers rose and roads closed."}) + "\n")
    summaries = tmp_path / "s.jsonl"
    rec = {"input_tokens": 10, "output_tokens": 5, "truncated": False}
    write_summaries(summaries, [f"{src}:1", f"{src}:3"], [
        dict(rec, summary="The council approved the budget."), dict(rec, summary="Rivers rose and roads closed."),
    ])
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    m = evaluate_summaries(str(summaries), [str(src)], ScoreParams(id_field=None), outputs).metrics
    assert m["n_documents"] == 2 and m["documents_without_reference"] == 0 and m["rouge1"] == pytest.approx(100)


def test_an_id_field_is_the_key_the_split_reads_even_with_a_dot_in_its_name(tmp_path):
    """input.id_field names a key of the record, as the split reads it: a flattened export
    (pandas json_normalize, datasets' flatten) has keys such as "doc.id". The references
    were read by a dotted path instead, so every summary lacked its reference, and the
    evaluation failed after every summarise job had run."""
    src = tmp_path / "src.jsonl"
    src.write_text(json.dumps({"doc.id": "a", "text": "The council met.", "highlights": "The council met."}) + "\n")
    (split_id,) = [r.id for r in iter_records([str(src)], ReaderOptions(id_field="doc.id"))]
    summaries = tmp_path / "s.jsonl"
    write_summaries(summaries, [split_id], [
        {"summary": "The council met.", "input_tokens": 3, "output_tokens": 3, "truncated": False},
    ])
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    m = evaluate_summaries(str(summaries), [str(src)], ScoreParams(id_field="doc.id"), outputs).metrics
    assert m["n_documents"] == 1 and m["rouge1"] == pytest.approx(100)
    # A nested object is not read through: the split finds no such key either.
    src.write_text(json.dumps({"doc": {"id": "a"}, "text": "x", "highlights": "The council met."}) + "\n")
    with pytest.raises(BadRecordError, match=r"src.jsonl:1: missing field 'doc.id'"):
        evaluate_summaries(str(summaries), [str(src)], ScoreParams(id_field="doc.id"), outputs)


def test_an_s3_runs_references_join_as_the_split_named_the_records(tmp_path, monkeypatch):
    """With S3 as default storage a job reads each source from Snakemake's local copy,
    while the split names records and rejects by the object's URL (core.s3.logical_path).
    Ids from positions had been `<local copy>:<line>`: no summary found its reference.
    And the split's rejects never matched the copy, so d1 was scored against the
    football reference of the line the split had rejected."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHARDFLOW_LOCAL_STORAGE", raising=False)
    monkeypatch.delenv("SHARDFLOW_STORAGE_PREFIX", raising=False)
    copy = tmp_path / ".snakemake/storage/s3/bucket/corpora/src.jsonl"
    copy.parent.mkdir(parents=True)
    url = "s3://bucket/corpora/src.jsonl"
    rows = [
        {"id": "d1", "article": "", "highlights": "The striker scored twice."},
        {"id": "d1", "article": "A cat slept.", "highlights": "A cat slept all day."},
    ]
    copy.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = ".snakemake/storage/s3/bucket/corpora/src.jsonl"
    summaries = tmp_path / "s.jsonl"
    rec = {"input_tokens": 3, "output_tokens": 3, "truncated": False}
    outputs = {k: str(tmp_path / n) for k, n in (("metrics", "m.json"), ("per_document", "p.parquet"), ("figure", "f.png"))}
    # input.id_field: null: the split's ids are the object's positions
    write_summaries(summaries, [f"{url}:2"], [dict(rec, summary="A cat slept.")])
    m = evaluate_summaries(str(summaries), [source], ScoreParams(id_field=None), outputs, system="lead").metrics
    assert m["n_documents"] == 1 and m["documents_without_reference"] == 0
    # ids from a field: line 1 (empty text) is the split's reject, named by the URL
    split_rejects = tmp_path / "rejects.jsonl"
    split_rejects.write_text(json.dumps({"source": url, "line": 1, "reason": "empty text", "raw": ""}) + "\n")
    write_summaries(summaries, ["d1"], [dict(rec, summary="A cat slept.")])
    skip = ScoreParams(on_bad_record="skip")
    scored = evaluate_summaries(str(summaries), [source], skip, outputs, split_rejects=str(split_rejects))
    assert scored.metrics["rejected_references"] == 0 and scored.metrics["rouge1"] > 50  # d1 against its own reference


def test_a_sweep_over_a_key_the_method_ignores_is_named():
    from shardflow.summarise.params import ignored_by

    assert ignored_by("lead", ["summarise.mmr_lambda", "summarise.k"]) == ["summarise.mmr_lambda"]
    assert ignored_by("abstractive", ["summarise.generation.num_beams", "summarise.k"]) == ["summarise.k"]
    assert ignored_by("extractive", ["summarise.mmr_lambda", "summarise.encoder"]) == []
