"""split: exactly N deterministic chunks, balanced by records, bytes or groups; the
chunk format it writes; and the atomic writes it (and every stage) relies on."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from shardflow.core.atomic import atomic_open, atomic_path, write_json
from shardflow.corpus.chunks import ChunkRecord, chunk_path, dump_record, iter_chunk, read_chunk
from shardflow.corpus.readers import BadRecordError, ReaderOptions
from shardflow.corpus.split import SplitParams, assign_groups, split_corpus


def make_docs(n: int, seed: int = 0) -> list[dict]:
    """Records with uneven text lengths (1-60 words) and some non-ASCII text."""
    rng = np.random.default_rng(seed)
    return [{"id": f"d{i}", "text": " ".join(["wörd"] * int(rng.integers(1, 61))) + f" {i}"} for i in range(n)]


def run_split(out: Path, inputs: list, n: int, opts: ReaderOptions | None = None, **params) -> dict:
    chunks = [chunk_path(out, i) for i in range(n)]
    return split_corpus(
        [str(p) for p in inputs],
        opts or ReaderOptions(),
        SplitParams(n_chunks=n, **params),
        chunks,
        out / "manifest.json",
        out / "rejects.jsonl",
    )


def chunk_ids(manifest: dict) -> list[list[str]]:
    return [read_chunk(c["path"])[0] for c in manifest["chunks"]]


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def corpus(tmp_path, write_jsonl):
    return write_jsonl(tmp_path / "in" / "corpus.jsonl", make_docs(103))


# --- the chunk files ---------------------------------------------------------------------


def test_writes_exactly_n_chunk_files(tmp_path, corpus):
    run_split(tmp_path / "out", [corpus], 7)
    assert sorted(p.name for p in (tmp_path / "out").glob("chunk_*.jsonl")) == sorted(
        f"chunk_{i}.jsonl" for i in range(7)
    )


def test_leaves_no_temporary_files_and_clears_a_killed_splits(tmp_path, corpus, monkeypatch):
    """A split SIGKILLed while writing chunks leaves their temporaries; the rerun clears
    them (shardflow.core.atomic), and each chunk is fsynced before it is renamed."""
    from shardflow.core import atomic

    out = tmp_path / "out"
    out.mkdir()
    dead = [out / f"chunk_{i}.jsonl.tmp-{atomic._host()}-{2**22 + 1}-0a0a0a0a" for i in range(5)]
    legacy = out / f"chunk_0.jsonl.tmp-{2**22 + 1}"  # named before temporaries named their host
    for p in (*dead, legacy):
        p.write_text("half a chunk")
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd)))
    run_split(out, [corpus], 5)
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
    assert all(any(s.startswith(str(out / f"chunk_{i}.jsonl.tmp-")) for s in synced) for i in range(5))


def test_two_splits_are_byte_identical(tmp_path, corpus):
    a = run_split(tmp_path / "a", [corpus], 6)
    b = run_split(tmp_path / "b", [corpus], 6)
    assert [sha256(c["path"]) for c in a["chunks"]] == [sha256(c["path"]) for c in b["chunks"]]
    assert len({sha256(c["path"]) for c in a["chunks"]}) == 6  # not all trivially equal


@pytest.mark.parametrize("n_records, n_chunks", [(103, 6), (10, 3), (12, 4), (5, 5), (1000, 7)])
def test_by_records_sizes_differ_by_at_most_one(tmp_path, write_jsonl, n_records, n_chunks):
    path = write_jsonl(tmp_path / "c.jsonl", make_docs(n_records))
    items = [c["items"] for c in run_split(tmp_path / "out", [path], n_chunks)["chunks"]]
    assert sum(items) == n_records
    assert max(items) - min(items) <= 1


def test_concatenated_chunks_give_input_order(tmp_path, corpus):
    manifest = run_split(tmp_path / "out", [corpus], 6)
    assert sum(chunk_ids(manifest), []) == [f"d{i}" for i in range(103)]


def test_chunk_records_keep_id_and_text(tmp_path, corpus):
    docs = make_docs(103)
    manifest = run_split(tmp_path / "out", [corpus], 3)
    texts = sum((read_chunk(c["path"])[1] for c in manifest["chunks"]), [])
    assert texts == [d["text"] for d in docs]


def test_multiple_inputs_are_read_in_order(tmp_path, write_jsonl):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": "x"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "b", "text": "y"}, {"id": "c", "text": "z"}])
    manifest = run_split(tmp_path / "out", [b, a], 2)
    assert sum(chunk_ids(manifest), []) == ["b", "c", "a"]
    assert manifest["sources"] == [str(b), str(a)]


def test_by_size_balances_text_bytes(tmp_path, write_jsonl):
    # A few huge records at the front: equal counts would put most bytes in chunk 0.
    docs = [{"id": f"big{i}", "text": "x" * 5000} for i in range(4)] + [
        {"id": f"s{i}", "text": "y" * 50} for i in range(400)
    ]
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    n = 4
    by_size = run_split(tmp_path / "size", [path], n, by="size")
    by_records = run_split(tmp_path / "rec", [path], n, by="records")
    target = sum(len(d["text"]) for d in docs) / n
    sizes = [c["bytes"] for c in by_size["chunks"]]
    assert all(abs(s - target) <= 5000 + 200 for s in sizes), sizes  # within one record (+ JSON overhead)
    assert max(c["bytes"] for c in by_records["chunks"]) > 2 * target  # the contrast the mode exists for
    assert sum(chunk_ids(by_size), []) == [d["id"] for d in docs]  # order still preserved


def test_by_size_weighs_utf8_bytes_not_characters(tmp_path, write_jsonl):
    # Chunk 0's 60 records of 4-byte characters weigh as much as chunk 1's 240 of ASCII.
    docs = [{"id": f"e{i}", "text": "😀" * 10} for i in range(60)] + [
        {"id": f"a{i}", "text": "a" * 10} for i in range(240)
    ]
    manifest = run_split(tmp_path / "out", [write_jsonl(tmp_path / "c.jsonl", docs)], 2, by="size")
    assert [c["items"] for c in manifest["chunks"]] == [60, 240]


# --- group_by ----------------------------------------------------------------------------


def grouped_docs() -> list[dict]:
    sizes = {"g0": 40, "g1": 3, "g2": 25, "g3": 17, "g4": 9, "g5": 30, "g6": 1, "g7": 12}
    docs, i = [], 0
    # Interleave the groups so that keeping them together is actual work.
    remaining = dict(sizes)
    while any(remaining.values()):
        for g in sizes:
            if remaining[g]:
                docs.append({"id": f"r{i}", "text": f"text {i}", "g": g})
                remaining[g] -= 1
                i += 1
    return docs


def test_group_by_keeps_every_group_in_one_chunk(tmp_path, write_jsonl):
    docs = grouped_docs()
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    manifest = run_split(tmp_path / "out", [path], 3, ReaderOptions(group_field="g"))
    chunk_of: dict[str, set[int]] = {}
    for c in manifest["chunks"]:
        for rec in iter_chunk(c["path"]):
            chunk_of.setdefault(rec.group, set()).add(c["chunk"])
    assert set(chunk_of) == {d["g"] for d in docs}
    assert all(len(chunks) == 1 for chunks in chunk_of.values()), chunk_of
    assert manifest["group_by"] == "g"


def test_group_by_balances_loads(tmp_path, write_jsonl):
    docs = grouped_docs()
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    items = [c["items"] for c in run_split(tmp_path / "out", [path], 3, ReaderOptions(group_field="g"))["chunks"]]
    # Largest first onto the least loaded: 40|30|25, +17 on 2, +12 on 1, +9 on 0, +3 on 1, +1 on 2.
    assert items == [49, 45, 43]
    # (Round-robin in first-seen order would give [58, 24, 55].)


def test_group_by_preserves_input_order_inside_a_chunk(tmp_path, write_jsonl):
    docs = grouped_docs()
    path = write_jsonl(tmp_path / "c.jsonl", docs)
    manifest = run_split(tmp_path / "out", [path], 3, ReaderOptions(group_field="g"))
    position = {d["id"]: k for k, d in enumerate(docs)}
    for ids in chunk_ids(manifest):
        assert [position[i] for i in ids] == sorted(position[i] for i in ids)


def test_group_by_with_few_open_files_gives_the_same_chunks(tmp_path, write_jsonl):
    # Interleaved groups across 5 chunks with 2 open files forces close-and-append.
    path = write_jsonl(tmp_path / "c.jsonl", grouped_docs())
    opts = ReaderOptions(group_field="g")
    wide = run_split(tmp_path / "wide", [path], 5, opts)
    narrow = run_split(tmp_path / "narrow", [path], 5, opts, max_open_files=2)
    assert [c["sha256"] for c in wide["chunks"]] == [c["sha256"] for c in narrow["chunks"]]
    assert [sha256(c["path"]) for c in narrow["chunks"]] == [c["sha256"] for c in narrow["chunks"]]


def interleaved_groups(n_records: int, n_groups: int) -> list[dict]:
    """Records of `n_groups` groups taking turns, as a group_by field (an author, a site)
    falls in a corpus that is not sorted by it."""
    return [{"id": f"r{i}", "text": f"text {i}", "g": f"g{i % n_groups}"} for i in range(n_records)]


def chunk_file_opens(monkeypatch) -> list[str]:
    """The opens of chunk files (their temporaries) the split makes, from now on."""
    import shardflow.corpus.split as split_module

    opened = []

    def counting_open(file, mode="r", *args, **kwargs):
        if "chunk_" in os.fspath(file):
            opened.append(os.fspath(file))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(split_module, "open", counting_open, raising=False)
    return opened


def test_group_by_over_more_chunks_than_open_files_opens_each_chunk_once_not_each_record(
    tmp_path, write_jsonl, monkeypatch
):
    # Records went to their chunk file as they came: with more chunks than open files and
    # groups taking turns, nearly every record closed one file and opened another (at
    # 5,000 chunks and 256 open files, 95 % of them: a file open and close a record).
    path = write_jsonl(tmp_path / "c.jsonl", interleaved_groups(3000, 300))
    opts = ReaderOptions(group_field="g")
    wide = run_split(tmp_path / "wide", [path], 40, opts, max_open_files=64)
    opened = chunk_file_opens(monkeypatch)
    narrow = run_split(tmp_path / "narrow", [path], 40, opts, max_open_files=4)
    assert len(opened) == 40  # one each: the corpus is far under the bytes held before writing
    assert [c["sha256"] for c in narrow["chunks"]] == [c["sha256"] for c in wide["chunks"]]
    assert [sha256(c["path"]) for c in narrow["chunks"]] == [c["sha256"] for c in narrow["chunks"]]


def test_chunks_written_in_many_small_turns_are_the_same_bytes(tmp_path, write_jsonl, monkeypatch):
    # Past the bytes held, every chunk's records are written and the rest held again: a
    # chunk file is then appended to, reopened where more chunks than open files.
    import shardflow.corpus.split as split_module

    path = write_jsonl(tmp_path / "c.jsonl", interleaved_groups(3000, 300))
    opts = ReaderOptions(group_field="g")
    whole = run_split(tmp_path / "whole", [path], 40, opts)
    monkeypatch.setattr(split_module, "HELD_BYTES", 2000)
    opened = chunk_file_opens(monkeypatch)
    turns = run_split(tmp_path / "turns", [path], 40, opts, max_open_files=4)
    assert 40 < len(opened) < 3000
    assert [c["sha256"] for c in turns["chunks"]] == [c["sha256"] for c in whole["chunks"]]
    assert [sha256(c["path"]) for c in turns["chunks"]] == [c["sha256"] for c in turns["chunks"]]
    for c in turns["chunks"]:
        assert read_chunk(c["path"])[0] == read_chunk(whole["chunks"][c["chunk"]]["path"])[0]


def test_assign_groups_largest_first_onto_least_loaded():
    placed = assign_groups({"small": 1, "big": 10, "mid": 5, "mid2": 5}, 2)
    # big -> 0; mid -> 1; mid2 -> 1 (load 5 < 10); small -> 0 (10 = 10, lowest index wins).
    assert placed == {"big": 0, "mid": 1, "mid2": 1, "small": 0}


def test_assign_groups_ties_broken_by_first_seen_order():
    assert assign_groups({"b": 2, "a": 2, "c": 2}, 3) == {"b": 0, "a": 1, "c": 2}


def test_assign_groups_compares_a_few_loads_a_group_not_every_chunks():
    # Each group was placed by looking at every chunk's load: 100,000 groups onto 5,000
    # chunks (a corpus of 100M records split with chunking.group_by) took 30 s, and the
    # time grows as groups x chunks. The loads compared count that work, not a clock.
    compared = 0

    class Weight(int):
        """A group's weight, and every load it adds to, counting comparisons of loads."""

        def __add__(self, other):
            return Weight(int(self) + int(other))

        __radd__ = __add__
        __hash__ = int.__hash__

        def _count(self):
            nonlocal compared
            compared += 1

        def __eq__(self, other):
            self._count()
            return int(self) == int(other)

        def __lt__(self, other):
            self._count()
            return int(self) < int(other)

        def __gt__(self, other):
            self._count()
            return int(self) > int(other)

    n_chunks, rng = 256, np.random.default_rng(0)
    groups = {f"g{i}": Weight(int(w)) for i, w in enumerate(rng.integers(1, 50, size=1000))}
    placed = assign_groups(groups, n_chunks)
    assert sorted(set(placed.values())) == list(range(n_chunks))
    assert compared <= len(groups) * 4 * math.ceil(math.log2(n_chunks))  # 32,000; every chunk's: ~500,000


def test_assign_groups_places_as_the_least_loaded_chunk_of_all_would():
    # The rule itself, checked against a plain scan of every chunk's load, on ties
    # (equal weights, equal loads) and on uneven weights alike.
    rng = np.random.default_rng(1)
    for n_chunks, n_groups, top in ((1, 5, 3), (3, 40, 2), (7, 300, 1000), (50, 2000, 5)):
        groups = {f"g{i}": int(w) for i, w in enumerate(rng.integers(0, top, size=n_groups))}
        load, expected = [0] * n_chunks, {}
        for group, weight in sorted(groups.items(), key=lambda gw: -gw[1]):  # stable: first seen first
            target = min(range(n_chunks), key=lambda i: (load[i], i))
            expected[group] = target
            load[target] += weight
        assert assign_groups(groups, n_chunks) == expected


# --- edge cases --------------------------------------------------------------------------


def test_more_chunks_than_records_gives_valid_empty_chunks(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "c.jsonl", make_docs(3))
    manifest = run_split(tmp_path / "out", [path], 5)
    assert [c["items"] for c in manifest["chunks"]] == [1, 1, 0, 1, 0]  # record k -> chunk floor(k*5/3)
    for c in manifest["chunks"]:
        assert os.path.isfile(c["path"])
        assert len(read_chunk(c["path"])[0]) == c["items"]
    empty = manifest["chunks"][2]
    assert (empty["bytes"], empty["sha256"]) == (0, hashlib.sha256(b"").hexdigest())


def test_single_chunk_holds_everything(tmp_path, corpus):
    manifest = run_split(tmp_path / "out", [corpus], 1)
    assert manifest["chunks"][0]["items"] == 103


def test_wrong_number_of_chunk_paths_raises(tmp_path, corpus):
    with pytest.raises(ValueError, match="2 chunk paths given for n_chunks=3"):
        split_corpus(
            [str(corpus)],
            ReaderOptions(),
            SplitParams(3),
            [tmp_path / "a", tmp_path / "b"],
            tmp_path / "m.json",
            tmp_path / "r.jsonl",
        )


def test_corpus_without_usable_records_raises(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a"}\n')
    with pytest.raises(ValueError, match="no usable record"):
        run_split(tmp_path / "out", [path], 2, ReaderOptions(on_bad_record="skip"))


@pytest.mark.parametrize(
    "params", [{"n_chunks": 0}, {"n_chunks": 2, "by": "tokens"}, {"n_chunks": 2, "rate_items_per_s": 0}]
)
def test_invalid_split_params_raise(params):
    with pytest.raises(ValueError):
        SplitParams(**params)


@pytest.mark.parametrize(
    ("params", "message"),
    [  # one case a field; each raised Python's bare TypeError in a bound or in the split, or was kept
        ({"n_chunks": "4"}, "n_chunks '4': expected an integer"),
        ({"n_chunks": True}, "n_chunks True: expected an integer"),  # one chunk
        ({"n_chunks": 4.5}, "n_chunks 4.5: expected an integer"),
        ({"n_chunks": 4, "rate_items_per_s": None}, "rate_items_per_s None: expected a number"),
        ({"n_chunks": 4, "max_open_files": "256"}, "max_open_files '256': expected an integer"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(params, message):
    with pytest.raises(TypeError) as info:
        SplitParams(**params)
    assert str(info.value) == message


def test_a_whole_float_chunk_count_splits_as_its_int(tmp_path, corpus):
    """n_chunks 4.0 stopped the split in `[0] * n` (can't multiply sequence by non-int)."""
    params = SplitParams(n_chunks=4.0, max_open_files=2.0)
    assert [(type(v), v) for v in (params.n_chunks, params.max_open_files)] == [(int, 4), (int, 2)]
    assert SplitParams(n_chunks=1, rate_items_per_s=40).rate_items_per_s == 40  # a float field keeps an int
    chunks = [chunk_path(tmp_path, i) for i in range(4)]
    manifest = split_corpus([str(corpus)], ReaderOptions(), params, chunks, tmp_path / "m.json", tmp_path / "r.jsonl")
    as_int = run_split(tmp_path / "a", [corpus], 4)
    assert [c["items"] for c in manifest["chunks"]] == [c["items"] for c in as_int["chunks"]]


def test_split_params_default_to_the_schemas_defaults():
    """A run passes chunking's values, which the schema's defaults fill; SplitParams'
    own defaults, for callers outside a run, are the same (rate_items_per_s was 50 items/s
    against the schema's and the README's 40)."""
    from shardflow.core.config import load_schema
    from tests.conftest import REPO

    chunking = load_schema(REPO / "config" / "config.schema.yaml")["properties"]["chunking"]["properties"]
    params = SplitParams(n_chunks=1)
    assert {k: getattr(params, k) for k in ("by", "rate_items_per_s")} == {
        k: chunking[k]["default"] for k in ("by", "rate_items_per_s")
    }


# --- the manifest ------------------------------------------------------------------------


def test_manifest_describes_every_chunk(tmp_path, corpus):
    manifest = run_split(tmp_path / "out", [corpus], 4, rate_items_per_s=10)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest
    assert manifest["n_chunks"] == 4 and manifest["total_records"] == 103 and manifest["by"] == "records"
    for i, c in enumerate(manifest["chunks"]):
        assert c["chunk"] == i
        assert c["path"] == str(chunk_path(tmp_path / "out", i))
        assert c["items"] == len(read_chunk(c["path"])[0])
        assert c["bytes"] == os.path.getsize(c["path"])
        assert c["sha256"] == sha256(c["path"])
        assert c["estimated_seconds"] == pytest.approx(c["items"] / 10)
    assert manifest["estimated_seconds_total"] == pytest.approx(10.3)


# --- bad records -------------------------------------------------------------------------


def corpus_with_bad_records(tmp_path) -> Path:
    lines = [
        '{"id": "a", "text": "fine"}',
        '{"id": "b", "text": ',  # malformed
        '{"id": "c", "text": "fine too"}',
        '{"id": "d", "text": ""}',  # empty text
        '{"text": "no id"}',  # missing id
        '{"id": "f", "text": "last"}',
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_skipped_records_go_to_rejects_and_are_counted(tmp_path):
    path = corpus_with_bad_records(tmp_path)
    manifest = run_split(tmp_path / "out", [path], 2, ReaderOptions(on_bad_record="skip"))
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["source"]) for r in rejects] == [(2, str(path)), (4, str(path)), (5, str(path))]
    assert manifest["rejected_records"] == len(rejects) == 3
    assert manifest["total_records"] == sum(c["items"] for c in manifest["chunks"]) == 3
    # Nothing dropped silently: every input line is either kept or rejected.
    n_lines = len(path.read_text().splitlines())
    assert manifest["total_records"] + manifest["rejected_records"] == n_lines
    assert sum(chunk_ids(manifest), []) == ["a", "c", "f"]


def test_clean_corpus_writes_an_empty_rejects_file(tmp_path, corpus):
    manifest = run_split(tmp_path / "out", [corpus], 2)
    assert (tmp_path / "out" / "rejects.jsonl").read_text() == ""
    assert manifest["rejected_records"] == 0


def test_bad_record_in_error_mode_stops_before_any_chunk_is_written(tmp_path):
    path = corpus_with_bad_records(tmp_path)
    with pytest.raises(BadRecordError, match=r"c\.jsonl:2:"):
        run_split(tmp_path / "out", [path], 2)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


# --- streaming ---------------------------------------------------------------------------
# Peak memory is measured by a benchmark elsewhere. Read for this module: _measure keeps
# counters and a per-group dict; pass 2 holds at most HELD_BYTES of records (64 MiB, one
# record more) before writing each chunk's together; nothing holds the corpus.


def test_the_repeated_id_check_holds_nothing_per_later_record(tmp_path):
    """Skipping, the check of repeated ids kept a reason string and a (file, line) key for
    every later record of a repeated id, 260 bytes each: a corpus of 10 M records listed
    twice (or re-crawled pages under one URL id) took 2.6 GB more, over a 4 GB job's
    limit. It keeps the first place of each repeated id only, so more copies of one
    corpus cost the 8-byte hash a record and nothing else."""
    n = 2000
    part = "".join(json.dumps({"id": f"https://example.com/page/{i:09d}", "text": "t"}) + "\n" for i in range(n))
    peaks = {}
    for copies in (2, 5):
        paths = []
        for c in range(copies):
            paths.append(tmp_path / f"copy{c}.jsonl")
            paths[-1].write_text(part)
        tracemalloc.start()
        try:
            manifest = run_split(tmp_path / f"out{copies}", paths, 2, ReaderOptions(on_bad_record="skip"))
            peaks[copies] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (manifest["total_records"], manifest["rejected_records"]) == (n, (copies - 1) * n)
    rejects = (tmp_path / "out5" / "rejects.jsonl").read_text().splitlines()
    assert json.loads(rejects[-1])["reason"] == f"duplicate id 'https://example.com/page/{n - 1:09d}' (first at {paths[0]}:{n})"
    grown_per_record = (peaks[5] - peaks[2]) / (3 * n)
    assert grown_per_record < 60, peaks  # hashes: 8 bytes, and their sorted copy


def test_a_file_written_to_between_the_passes_is_named(tmp_path):
    """The counts of the two passes differ: the error names the file that changed, where
    it said only 'input changed between passes' before."""
    stable, growing = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    stable.write_text('{"id": "a1", "text": "x"}\n')
    growing.write_text('{"id": "b1", "text": "y"}\n')

    def append_once(record, chunk):
        if record.id == "a1":  # pass 2 has begun: b.jsonl grows before it is read
            with open(growing, "a") as fh:
                fh.write('{"id": "b2", "text": "z"}\n')

    chunks = [chunk_path(tmp_path / "out", 0)]
    with pytest.raises(RuntimeError, match=rf"changed since the split began: {re.escape(str(growing))}\): pass 2 read more than 2 records"):
        split_corpus([str(stable), str(growing)], ReaderOptions(), SplitParams(n_chunks=1), chunks,
                     tmp_path / "out" / "manifest.json", tmp_path / "out" / "rejects.jsonl", on_record=append_once)

    def empty_once(record, chunk):  # fewer records in pass 2: found at its end
        if record.id == "a1":
            growing.write_text("")

    growing.write_text('{"id": "b1", "text": "y"}\n')
    with pytest.raises(RuntimeError, match=rf"changed since the split began: {re.escape(str(growing))}\): pass 2 read 1/0, pass 1 2/0"):
        split_corpus([str(stable), str(growing)], ReaderOptions(), SplitParams(n_chunks=1), chunks,
                     tmp_path / "out" / "manifest.json", tmp_path / "out" / "rejects.jsonl", on_record=empty_once)


# --- the chunk format --------------------------------------------------------------------


def test_dump_record_is_compact_fixed_order_utf8():
    assert dump_record(ChunkRecord("i", "tëxt\nnew")) == '{"id":"i","text":"tëxt\\nnew"}\n'
    assert dump_record(ChunkRecord("i", "t", "g")) == '{"id":"i","text":"t","group":"g"}\n'


def test_chunk_round_trip_keeps_awkward_text(tmp_path):
    texts = ["line\nbreak", "carriage\rreturn", "tab\there", "sep\u2028arator", "nul\x00byte", "emoji 😀"]
    path = tmp_path / "chunk_0.jsonl"
    path.write_text("".join(dump_record(ChunkRecord(f"id{i}", t)) for i, t in enumerate(texts)), encoding="utf-8")
    assert read_chunk(path) == ([f"id{i}" for i in range(len(texts))], texts)


@pytest.mark.parametrize("line", ['{"id": "x"}', "not json", '["id", "text"]'])
def test_iter_chunk_error_names_file_and_line(tmp_path, line):
    path = tmp_path / "chunk_0.jsonl"
    path.write_text('{"id":"a","text":"ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=r"chunk_0\.jsonl:2: not a shardflow chunk record"):
        read_chunk(path)


def test_iter_chunk_line_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "chunk_0.jsonl"
    path.write_bytes(b'{"id":"a","text":"ok"}\n{"id":"b","text":"caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"chunk_0\.jsonl:2: not a shardflow chunk record \(invalid UTF-8 at byte 21 of"):
        read_chunk(path)


# --- atomic writes -----------------------------------------------------------------------


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_open_publishes_on_success(tmp_path):
    with atomic_open(tmp_path / "sub" / "f.txt", "w") as fh:
        fh.write("done")
    assert (tmp_path / "sub" / "f.txt").read_text() == "done"
    assert leftovers(tmp_path / "sub") == ["f.txt"]


def test_atomic_open_failure_leaves_no_file_and_no_temp(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_open(tmp_path / "f.txt", "w") as fh:
            fh.write("half")
            raise RuntimeError("boom")
    assert leftovers(tmp_path) == []


def test_atomic_open_failure_keeps_the_previous_file(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as fh:
            fh.write("new")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == ["f.txt"]


def test_atomic_path_failure_leaves_no_file_and_no_temp(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "m.npy") as tmp:
            np.lib.format.open_memmap(tmp, mode="w+", dtype="float32", shape=(4, 2))
            assert tmp.exists() and tmp.parent == tmp_path
            raise RuntimeError("boom")
    assert leftovers(tmp_path) == []


def test_write_json_sorts_keys_and_converts_numpy_scalars(tmp_path):
    write_json(tmp_path / "x.json", {"b": np.float32(1.5), "a": np.int64(2), "p": Path("a/b")})
    text = (tmp_path / "x.json").read_text()
    assert json.loads(text) == {"a": 2, "b": 1.5, "p": "a/b"}
    assert text.index('"a"') < text.index('"b"')


def test_write_json_unserialisable_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "x.json", {"x": object()})
    assert leftovers(tmp_path) == []


def test_a_retrieval_corpus_bad_record_names_the_keys_that_apply_to_it(tmp_path, write_jsonl):
    """The retrieval corpus (the chunk format this workflow wrote, read as
    workflow.plan.CHUNK_READER reads it) takes input.max_record_mb from the main corpus,
    but always on_bad_record: error: its bad record is no skippable one (scripts/split.py
    would add 'input.on_bad_record: skip sets such records aside'), and the error says
    what to change. The main corpus's is skippable as before."""
    docs = [{"id": "d0", "text": "short"}, {"id": "d1", "text": "x" * 2000}]
    path = write_jsonl(tmp_path / "in" / "corpus.jsonl", docs)
    chunk_reader = dict(format="jsonl", on_bad_record="error", keep_empty_text=True, max_record_bytes=1024)
    with pytest.raises(BadRecordError, match="record too large") as err:
        run_split(tmp_path / "out", [path], 1, ReaderOptions(**chunk_reader))
    assert not err.value.skippable and err.value.line == 2
    assert "input.on_bad_record does not apply to it" in str(err.value)
    assert "raise input.max_record_mb, which this split reads too" in str(err.value)
    with pytest.raises(BadRecordError, match="record too large") as err:  # the main corpus: skippable, no such hint
        run_split(tmp_path / "out2", [path], 1, ReaderOptions(format="jsonl", max_record_bytes=1024))
    assert err.value.skippable and "does not apply" not in str(err.value)
    dup = write_jsonl(tmp_path / "in" / "dup.jsonl", [{"id": "d0", "text": "a"}, {"id": "d0", "text": "b"}])
    with pytest.raises(BadRecordError, match="input.on_bad_record does not apply") as err:  # a repeated id too
        run_split(tmp_path / "out3", [dup], 1, ReaderOptions(**chunk_reader))
    assert not err.value.skippable
