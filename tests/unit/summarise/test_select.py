"""select_chunk, the lead and extractive chunk job: edges of its input (an empty chunk,
k past the sentence count, unicode, empty texts), its windows and resume key, and what a
failed job leaves. Writing in order, resuming and the orphan check are in test_stage.py."""

import json
import logging
import os

import pytest

from shardflow.core import controller
from shardflow.summarise.params import SummariseParams
from shardflow.summarise.select import select_chunk
from tests.support.fake_encoder import CountingEncoder

STATS_KEYS = [
    "items", "input_tokens", "output_tokens", "truncated", "items_generated", "resumed_parts", "seconds",
    "items_per_s", "start_unix", "end_unix", "device", "method", "peak_gpu_mem_mib", "peak_gpu_mem_reserved_mib",
    "earlier_attempts", "earlier_attempt_seconds", "earlier_attempt_devices",
]  # fmt: skip


@pytest.fixture(autouse=True)
def no_snakemake(monkeypatch):
    """No Snakemake runs these jobs: the orphan check finds none, as under pytest alone."""
    monkeypatch.setattr(controller, "find", lambda: None)


def write_chunk(path, texts):
    path.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
    )
    return path


def read_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]




def test_an_empty_chunk_writes_an_empty_summaries_file_and_zero_stats(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [])
    out = tmp_path / "out.jsonl"
    stats = select_chunk(chunk, out, SummariseParams(), tmp_path / "resume")
    assert out.read_bytes() == b""
    assert list(stats) == STATS_KEYS
    assert {k: stats[k] for k in STATS_KEYS if k not in ("seconds", "start_unix", "end_unix")} == {
        "items": 0, "input_tokens": 0, "output_tokens": 0, "truncated": 0, "items_generated": 0, "resumed_parts": 0,
        "items_per_s": 0.0, "device": "cpu", "method": "lead", "peak_gpu_mem_mib": None,
        "peak_gpu_mem_reserved_mib": None, "earlier_attempts": 0, "earlier_attempt_seconds": 0,
        "earlier_attempt_devices": {},
    }  # fmt: skip
    assert not (tmp_path / "resume").exists()


@pytest.mark.parametrize("k", [1, 4, 5, 100])
def test_k_past_the_sentence_count_keeps_every_sentence(tmp_path, k):
    text = "One a. Two b b. Three c c c. Four d d d d."
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [text])
    out = tmp_path / "out.jsonl"
    stats = select_chunk(chunk, out, SummariseParams(k=k), tmp_path / "resume")
    sentences = ["One a.", "Two b b.", "Three c c c.", "Four d d d d."][:k]
    (row,) = read_lines(out)
    assert row == {
        "id": "doc-0",
        "summary": "\n".join(sentences),
        "input_tokens": 14,
        "output_tokens": sum(len(s.split()) for s in sentences),
        "truncated": False,
    }
    assert (stats["input_tokens"], stats["output_tokens"]) == (14, row["output_tokens"])


def test_unicode_is_kept_byte_for_byte_and_words_split_on_any_whitespace(tmp_path):
    texts = ["Größe zählt.\u00a0Ça va.", "東京 は 大きい 街 です", "Emoji 🙂 stay. Second."]
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    out = tmp_path / "out.jsonl"
    select_chunk(chunk, out, SummariseParams(k=1), tmp_path / "resume")
    rows = read_lines(out)
    assert [r["summary"] for r in rows] == ["Größe zählt.", "東京 は 大きい 街 です", "Emoji 🙂 stay."]
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(4, 2), (5, 5), (4, 3)]  # NBSP splits words
    assert "Größe".encode() in out.read_bytes()  # written as UTF-8, not \\u escapes


def test_a_document_with_no_text_or_no_sentence_end(tmp_path):
    """An empty or blank text (the retrieval split keeps them) has no sentence: its summary
    is empty, not dropped, so the summaries still line up with the chunk's ids."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["", "   \n ", "no full stop at all"])
    out = tmp_path / "out.jsonl"
    stats = select_chunk(chunk, out, SummariseParams(k=2), tmp_path / "resume")
    rows = read_lines(out)
    assert [(r["id"], r["summary"], r["input_tokens"], r["output_tokens"]) for r in rows] == [
        ("doc-0", "", 0, 0),
        ("doc-1", "", 0, 0),
        ("doc-2", "no full stop at all", 5, 5),
    ]
    assert stats["items"] == 3


@pytest.mark.parametrize(("window", "parts"), [(1, 5), (2, 3), (5, 1), (1000, 1)])
def test_windows_cut_the_chunk_into_parts_and_the_output_does_not_depend_on_them(tmp_path, window, parts, caplog):
    texts = [f"Doc {i} first. Doc {i} second. Doc {i} third." for i in range(5)]
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    ref = tmp_path / "ref.jsonl"
    select_chunk(chunk, ref, SummariseParams(k=2, window=5), tmp_path / "ref_resume")
    out = tmp_path / "out.jsonl"
    logger = logging.getLogger("test_select")
    with caplog.at_level(logging.INFO, logger="test_select"):
        select_chunk(chunk, out, SummariseParams(k=2, window=window), tmp_path / "resume", logger)
    assert out.read_bytes() == ref.read_bytes()
    progress = [r.getMessage() for r in caplog.records if r.name == "test_select"]
    assert len(progress) == parts and progress[-1] == "summarised 5/5 documents"


def _encoder(params):
    return CountingEncoder() if params.method == "extractive" else None  # as scripts/summarise.py passes it


def _orphaned_run(chunk, out, params, resume, monkeypatch):
    """A run whose Snakemake is gone: it keeps its parts and writes nothing."""
    import os

    monkeypatch.setattr(controller, "find", lambda: controller.Controller(os.getpid(), "another start"))
    with pytest.raises(controller.OrphanedJobError):
        select_chunk(chunk, out, params, resume, encoder=_encoder(params))
    monkeypatch.setattr(controller, "find", lambda: None)


@pytest.mark.parametrize(
    ("base", "changed"),
    [
        ({}, {"k": 1}),
        ({}, {"splitter": "prose"}),
        ({}, {"window": 1}),
        ({}, {"method": "extractive"}),
        ({"method": "extractive"}, {"mmr_lambda": 0.2}),
    ],
)
def test_parts_of_other_settings_are_not_resumed(tmp_path, monkeypatch, base, changed):
    """The resume folder is named by everything that decides a summary (and the window,
    which decides the parts): a changed setting starts over rather than mixing summaries.
    The killed attempt at the same output under the old setting is another job's (set
    back, the old setting resumes its parts): left as it is, and not counted
    (core.parts.remove_job_parts)."""
    texts = ["Mr. Smith left. He came back. Then he left again.", "A short one. Another one. A third one."]
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    out, resume = tmp_path / "out.jsonl", tmp_path / "resume"
    before = SummariseParams(**{"k": 2, "window": 2, **base})
    _orphaned_run(chunk, out, before, resume, monkeypatch)
    assert len(list(resume.iterdir())) == 1
    # The same settings resume (so the check below is not vacuous).
    again = select_chunk(chunk, tmp_path / "again.jsonl", before, resume, encoder=_encoder(before))
    assert again["resumed_parts"] == 1
    _orphaned_run(chunk, out, before, resume, monkeypatch)
    params = SummariseParams(**{"k": 2, "window": 2, **base, **changed})
    stats = select_chunk(chunk, out, params, resume, encoder=_encoder(params))
    assert stats["resumed_parts"] == 0 and stats["earlier_attempts"] == 0
    fresh = tmp_path / "fresh.jsonl"
    select_chunk(chunk, fresh, params, tmp_path / "fresh_resume", encoder=_encoder(params))
    assert out.read_bytes() == fresh.read_bytes()
    assert select_chunk(chunk, out, before, resume, encoder=_encoder(before))["resumed_parts"] == 1


def test_another_encoders_parts_are_not_resumed(tmp_path, monkeypatch):
    """Another encoder (or the same on other hardware, which its identity names) starts
    over. The killed attempt under the same encoder's settings (on other hardware) is
    counted and its folder removed; another encoder's, or one whose encoder does not
    say its settings apart from its hardware, is left and not counted."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["A one. B two. C three.", "D four. E five. F six."])
    out, resume = tmp_path / "out.jsonl", tmp_path / "resume"
    params = SummariseParams(method="extractive", k=2, window=1)
    _orphaned_run(chunk, out, params, resume, monkeypatch)
    same = CountingEncoder()  # the same encoder resumes (so the check below is not vacuous)
    assert select_chunk(chunk, tmp_path / "o2.jsonl", params, resume, encoder=same)["resumed_parts"] == 2
    assert same.calls == 0
    _orphaned_run(chunk, out, params, resume, monkeypatch)

    class OtherEncoder(CountingEncoder):
        identity = {"fake": 2}

    enc = OtherEncoder()
    stats = select_chunk(chunk, out, params, resume, encoder=enc)
    assert stats["resumed_parts"] == 0 and stats["earlier_attempts"] == 0
    assert enc.calls == 6  # every sentence embedded again
    assert len(list(resume.iterdir())) == 1  # the first encoder's

    class OnA100(CountingEncoder):
        identity, settings = {"fake": 1, "hardware": "A100"}, {"fake": 1}

    class OnH100(OnA100):
        identity = {"fake": 1, "hardware": "H100"}

    resume = tmp_path / "resume2"
    monkeypatch.setattr(controller, "find", lambda: controller.Controller(os.getpid(), "another start"))
    with pytest.raises(controller.OrphanedJobError):
        select_chunk(chunk, out, params, resume, encoder=OnA100())
    monkeypatch.setattr(controller, "find", lambda: None)
    stats = select_chunk(chunk, out, params, resume, encoder=OnH100())
    assert stats["resumed_parts"] == 0 and stats["earlier_attempts"] == 1
    assert not resume.exists()


def test_extractive_without_an_encoder_fails_before_writing(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["A one. B two. C three."])
    out = tmp_path / "out.jsonl"
    with pytest.raises(ValueError) as info:
        select_chunk(chunk, out, SummariseParams(method="extractive"), tmp_path / "resume")
    assert str(info.value) == "method 'extractive' needs an encoder (shardflow.embed.engine.load_encoder)"
    assert not out.exists()


def test_a_damaged_chunk_line_names_the_chunk_and_line_and_writes_nothing(tmp_path):
    chunk = tmp_path / "chunk_0.jsonl"
    chunk.write_text('{"id": "a", "text": "Fine."}\n{"id": "b"}\n')
    out = tmp_path / "out.jsonl"
    with pytest.raises(ValueError) as info:
        select_chunk(chunk, out, SummariseParams(), tmp_path / "resume")
    assert str(info.value) == f"{chunk}:2: not a shardflow chunk record ('text')"
    assert not out.exists() and not (tmp_path / "resume").exists()


def test_a_missing_chunk_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="chunk_9.jsonl"):
        select_chunk(tmp_path / "chunk_9.jsonl", tmp_path / "out.jsonl", SummariseParams(), tmp_path / "resume")


def test_the_device_is_the_encoders_and_lead_runs_on_the_cpu(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["A one. B two. C three."])
    assert select_chunk(chunk, tmp_path / "a.jsonl", SummariseParams(), tmp_path / "r")["device"] == "cpu"
    enc = CountingEncoder()
    stats = select_chunk(
        chunk, tmp_path / "b.jsonl", SummariseParams(method="extractive", k=2), tmp_path / "r", encoder=enc
    )
    assert (stats["device"], stats["method"], stats["truncated"]) == ("cpu", "extractive", 0)
