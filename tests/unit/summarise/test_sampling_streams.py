"""Sampling's random streams: one per (seed, chunk, document), unrelated to each other.

Seeding each window with seed + window index made a sweep's seeds shifted copies of
each other (seed 1's window 0 drew seed 0's window 1) and gave every chunk's first
window one stream; one stream per window made a sample depend on the batch it was
drawn in, and on an out-of-memory back-off splitting it. These tests summarise the
same texts in places where such seeding drew the same stream, or another one, with a
tiny random GPT-2 (built offline, about a second).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shardflow.core.hashing import texts_fingerprint
from shardflow.core.parts import resume_key
from shardflow.corpus.chunks import ChunkRecord, write_record
from shardflow.summarise.generate import (
    SAMPLING_STREAMS,
    GenerateParams,
    document_seed,
    load_generator,
    summarise_chunk,
)
from shardflow.summarise.records import iter_summaries
from tests.support import tiny_generators, tiny_models

WINDOW = 6


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    return tiny_generators.build_gpt2(tmp_path_factory.mktemp("tiny_gpt2"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return tiny_models.sample_texts(2 * WINDOW)


def sampling(model: Path, **kw) -> GenerateParams:
    return GenerateParams(model=str(model), device="cpu", do_sample=True, window=WINDOW, **kw)


def summaries(records: list[dict]) -> list[str]:
    return [r["summary"] for r in records]


def write_chunk(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            write_record(fh, ChunkRecord(f"doc-{i:05d}", text))
    return path


def test_document_seeds_differ_by_seed_chunk_and_position_and_are_pinned():
    chunks = [texts_fingerprint(["one"]), texts_fingerprint(["two"])]
    seeds = {(s, c, i): document_seed(s, c, i) for s in (0, 1, 2, -1) for c in chunks for i in range(4)}
    assert all(0 <= v < 2**64 for v in seeds.values())
    assert len(set(seeds.values())) == len(seeds)
    # Torch's CPU generator keeps the low 32 bits of a seed: those differ too.
    assert len({v & 0xFFFFFFFF for v in seeds.values()}) == len(seeds)
    # Pinned: a rerun (another process, another host) draws what the first run drew.
    assert document_seed(0, chunks[0], 0) == 2985730539603770823
    assert document_seed(1, chunks[0], 0) == 9557771676606524240


def test_another_seed_draws_no_shifted_copy_of_a_seeds_windows(gpt2, texts):
    same_twice = texts[:WINDOW] * 2  # windows 0 and 1 hold the same texts
    seed0 = load_generator(sampling(gpt2, seed=0)).summarise(same_twice)
    seed1 = load_generator(sampling(gpt2, seed=1)).summarise(same_twice)
    # With seed + window index, seed 1's window 0 drew seed 0's window 1, token for token.
    assert summaries(seed1[:WINDOW]) != summaries(seed0[WINDOW:])
    assert summaries(seed1[WINDOW:]) != summaries(seed0[WINDOW:])
    assert summaries(seed0[:WINDOW]) != summaries(seed0[WINDOW:])


def test_each_chunks_first_window_draws_its_own_stream_and_a_rerun_draws_the_same(gpt2, texts):
    p = sampling(gpt2, seed=0)
    gen = load_generator(p)
    alone = gen.summarise(texts[:WINDOW])
    longer = gen.summarise(texts)  # another chunk, opening with the same window of texts
    assert summaries(alone) != summaries(longer[:WINDOW])
    rerun = load_generator(p)
    assert rerun.summarise(texts[:WINDOW]) == alone and rerun.summarise(texts) == longer


def test_the_streams_key_a_sampled_run_and_leave_other_runs_keys_alone(gpt2, texts, tmp_path, monkeypatch):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    root = tmp_path / "resume"
    p = sampling(gpt2, seed=0)
    gen = load_generator(p)
    assert gen.identity["sampling_streams"] == SAMPLING_STREAMS
    # A killed job's parts drawn by the old seeding (its key had no scheme) are not resumed.
    old = load_generator(p)
    old.identity = {k: v for k, v in gen.identity.items() if k != "sampling_streams"}
    old_folder = root / resume_key(chunk, old.identity)
    old.summarise(texts, resume_dir=old_folder)
    part = old_folder / "part-000000.jsonl"
    rows = [json.loads(line) | {"summary": "drawn the old way"} for line in part.read_text().splitlines()]
    part.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "summaries.jsonl"
    stats = summarise_chunk(chunk, out, p, root, generator=gen)
    assert stats["resumed_parts"] == 0
    assert [r["summary"] for r in iter_summaries(out)] == summaries(gen.summarise(texts))
    assert part.exists()  # left to its own key, never mixed in
    # Greedy and beam runs draw nothing: no seeding, and the identity (so the resume key) as it was
    # (but for "prompt_cut", which every decoder-only run's has: generate.Generator._text_head).
    monkeypatch.setattr(torch, "manual_seed", lambda seed: pytest.fail("a greedy run seeded torch"))
    greedy = load_generator(GenerateParams(model=str(gpt2), device="cpu", do_sample=False, seed=0, window=WINDOW))
    greedy.summarise(texts)
    assert set(greedy.identity) == {
        "format", "model", "device", "hardware", "dtype", "generation", "prefix", "prompt", "chat_template",
        "input_limit", "token_budget", "max_batch_size", "window", "seed", "torch", "transformers", "threads",
        "prompt_cut",
    }  # fmt: skip


@pytest.mark.parametrize("num_beams", [1, 2])
def test_an_out_of_memory_back_off_draws_what_a_run_without_it_draws(gpt2, texts, num_beams):
    """The back-off halves a batch that did not fit (core.oom). With one random stream per
    window the halves drew other numbers than the whole batch, and every summary of the
    window came out another sample than the run without the out-of-memory: a rerun on a
    bigger device, or with a smaller token budget, did not reproduce a run. Each document
    draws from its own stream now, so neither the batch nor its splitting changes a sample."""
    from dataclasses import replace

    p = sampling(gpt2, seed=0, num_beams=num_beams)
    clean = load_generator(p).summarise(texts)
    failed = []

    def out_of_memory_once(input_ids):  # a fake device: the first batch of several rows does not fit
        if not failed and len(input_ids) > 1:
            failed.append(tuple(input_ids.shape))
            raise torch.cuda.OutOfMemoryError("injected: out of memory")

    gen = load_generator(p, before_generate=out_of_memory_once)
    backed_off = gen.summarise(texts)
    assert failed and gen.last_stats.oom_backoffs == 1
    assert summaries(backed_off) == summaries(clean)
    # A clean run with the lowered budget, and one document a batch, draw the same too.
    for smaller in (replace(p, token_budget=gen.backoff.token_budget), replace(p, max_batch_size=1)):
        assert summaries(load_generator(smaller).summarise(texts)) == summaries(clean)
    assert len(set(summaries(clean))) > len(texts) // 2  # the samples differ from text to text


@pytest.fixture(scope="module")
def bart_top_k_top_p(tmp_path_factory) -> Path:
    """A seq2seq model whose own generation config samples with warpers (top-k, top-p, a temperature)."""
    root = tmp_path_factory.mktemp("tiny_bart_sampling")
    return tiny_generators.build_bart(root, do_sample=True, top_k=10, top_p=0.95, temperature=0.8)


@pytest.mark.parametrize("model,num_beams", [("gpt2", 1), ("gpt2", 2), ("bart", 1), ("bart", 2)])
def test_a_sampled_summary_is_generate_alone_with_its_documents_stream(gpt2, bart_top_k_top_p, texts, model, num_beams):
    """What the module promises: a sampled summary is `model.generate` on its text alone,
    drawing from the one stream `document_seed` gives the document (`_DocumentStreams`)."""
    from shardflow.summarise.generate import _DocumentStreams, _drawing_from

    folder = {"gpt2": gpt2, "bart": bart_top_k_top_p}[model]
    gen = load_generator(sampling(folder, seed=7, num_beams=num_beams, token_budget=600))
    records = gen.summarise(texts)
    assert gen.last_stats.batches > 2  # batched, several rows a batch
    ids, _ = gen.encode(texts)
    chunk = texts_fingerprint(texts)
    for i, x in enumerate(ids):
        streams = _DocumentStreams([document_seed(7, chunk, i)])
        with torch.inference_mode(), _drawing_from(streams):
            out = gen.model.generate(
                input_ids=torch.tensor([x]),
                attention_mask=torch.ones(1, len(x), dtype=torch.long),
                generation_config=gen.generation_config,
            )[0]
        new = out[len(x) :] if gen.decoder_only else out[1:]
        assert records[i]["summary"] == gen.tokenizer.decode(new, skip_special_tokens=True).strip(), f"text {i}"
    assert len(set(summaries(records))) > len(texts) // 2


def test_an_out_of_memory_inside_generate_leaves_nothing_behind(gpt2, texts):
    """An out-of-memory in the middle of `generate` (steps already drawn, not before it
    as the hook of the test above raises it): the halves draw from their documents'
    fresh streams, later windows are untouched, and torch.multinomial is torch's again,
    after it and after a KeyboardInterrupt raised the same way."""
    p = sampling(gpt2, seed=0, num_beams=2)
    clean = summaries(load_generator(p).summarise(texts))
    original = torch.multinomial
    gen = load_generator(p)
    head = gen.model.get_output_embeddings()
    steps = []

    def out_of_memory_at_step_3(module, args):  # the first batch of several rows, 3 steps in
        steps.append(len(args[0]))
        if len(steps) == 3 and len(args[0]) > 2:
            raise torch.OutOfMemoryError("injected: out of memory")

    hook = head.register_forward_pre_hook(out_of_memory_at_step_3)
    backed_off = summaries(gen.summarise(texts))
    hook.remove()
    assert gen.last_stats.oom_backoffs == 1 and torch.multinomial is original
    assert backed_off == clean

    def interrupted(module, args):
        raise KeyboardInterrupt

    hook = head.register_forward_pre_hook(interrupted)
    with pytest.raises(KeyboardInterrupt):
        gen.summarise(texts)
    hook.remove()
    assert torch.multinomial is original
    assert summaries(gen.summarise(texts)) == clean
