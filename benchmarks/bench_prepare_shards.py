"""Token-shard preparation: throughput, and peak memory as the corpus grows 10x.

Builds a synthetic chunked corpus from the workflow's demo corpus (stdlib
docstrings, shardflow.corpus.demo): `--base-copies` perturbed copies of it make
the 1x corpus, ten times as many the 10x one. Each copy rotates every document's
words and tags it, so exact de-duplication keeps it. Chunks hold a fixed number of
documents (`--docs-per-chunk`), so the larger corpus has more chunks of the same
size, as `n_chunks: auto` gives in the workflow.

One tokenizer (byte-level bpe trained on the 1x corpus, or `--tokenizer char|default`)
serves both sizes. For each size a fresh subprocess runs `tokenize_chunk` on every
chunk and then `gather_shards` (de-duplication on, hash split 10%), and reports
its tokens, seconds and peak RSS (VmHWM from /proc/self/status at its end: this
process image's peak, not the parent's). The one part of the memory that grows
with the corpus is gather's cross-chunk de-duplication set (~100 bytes a
document); `--no-dedup` shows the rest is flat.

    python benchmarks/bench_prepare_shards.py                 # ~1 minute on 2 CPU cores

The last line is exactly `peak RSS ratio 10x/1x: <x>` (target: at most 1.2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]


def base_texts(corpus: str | None, work: Path) -> list[tuple[str, str]]:
    path = corpus
    if path is None:
        from shardflow.corpus.demo import DemoParams, build_demo_corpus

        path = str(work / "demo.jsonl")
        build_demo_corpus(path, DemoParams())
    with open(path, encoding="utf-8") as fh:
        return [(obj["id"], obj["text"]) for obj in map(json.loads, filter(str.strip, fh))]


def perturb(text: str, copy: int) -> str:
    if copy == 0:
        return text
    words = text.split(" ")
    k = copy % len(words)
    return f"[variant {copy}] " + " ".join(words[k:] + words[:k])


def write_chunks(base: list[tuple[str, str]], copies: int, docs_per_chunk: int, folder: Path) -> list[str]:
    """Stream `copies` perturbed copies of `base` into chunk files of `docs_per_chunk` records."""
    from shardflow.corpus.chunks import ChunkRecord, chunk_path, dump_record

    folder.mkdir(parents=True, exist_ok=True)
    paths, fh, n = [], None, 0
    for copy in range(copies):
        for doc_id, text in base:
            if n % docs_per_chunk == 0:
                if fh:
                    fh.close()
                paths.append(str(chunk_path(folder, len(paths))))
                fh = open(paths[-1], "w", encoding="utf-8")
            fh.write(dump_record(ChunkRecord(f"{doc_id}#{copy}", perturb(text, copy))))
            n += 1
    fh.close()
    return paths


_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from shardflow.train.prepare import ShardParams, TokenizeParams, gather_shards, tokenize_chunk
from shardflow.train.tokenizer import load_tokenizer
args = json.loads(sys.argv[1])
tok = load_tokenizer(args["tokenizer"])
t0 = time.perf_counter()
outs = []
for i, chunk in enumerate(args["chunks"]):
    out = f"{{args['work']}}/tokenized/tok_{{i}}.bin"
    tokenize_chunk(chunk, tok, out, TokenizeParams(dedup=args["dedup"]))
    outs.append(out)
t1 = time.perf_counter()
meta = gather_shards(outs, args["work"] + "/shards", ShardParams(tokens_per_shard=args["tokens_per_shard"], dedup=args["dedup"]))
t2 = time.perf_counter()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"tokens": meta["totals"]["tokens"], "documents": meta["totals"]["documents"],
                  "shards": len(meta["shards"]), "tokenize_s": t1 - t0, "gather_s": t2 - t1, "vmhwm_kb": hwm}}))
"""


def run_size(label: str, chunks: list[str], tokenizer: Path, work: Path, tokens_per_shard: int, dedup: bool) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    args = {
        "chunks": chunks,
        "tokenizer": str(tokenizer),
        "work": str(work),
        "tokens_per_shard": tokens_per_shard,
        "dedup": dedup,
    }
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(REPO)), json.dumps(args)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{label}: child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["label"], res["chunks"] = label, len(chunks)
    res["corpus_mb"] = sum(os.path.getsize(c) for c in chunks) / 2**20
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="JSONL with id and text fields (default: build the demo corpus)")
    ap.add_argument("--base-copies", type=int, default=2, help="copies of the base corpus in the 1x corpus")
    ap.add_argument("--docs-per-chunk", type=int, default=2000)
    ap.add_argument("--tokenizer", default="bpe", help="bpe (trained on the 1x corpus), char, or a tokenizer path")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--tokens-per-shard", type=int, default=1_000_000)
    ap.add_argument(
        "--no-dedup", action="store_true", help="skip exact de-duplication (its hash set grows with documents)"
    )
    ap.add_argument("--workdir", help="keep files here (default: a temporary folder, removed)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from shardflow.train.prepare import TokenizerParams, train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.workdir or tmp)
        base = base_texts(a.corpus, work)
        small = write_chunks(base, a.base_copies, a.docs_per_chunk, work / "chunks_1x")
        large = write_chunks(base, 10 * a.base_copies, a.docs_per_chunk, work / "chunks_10x")
        t0 = time.perf_counter()
        # char must see every character of the larger corpus; bpe learns from the 1x corpus only.
        ident = train_tokenizer(
            large if a.tokenizer == "char" else small,
            TokenizerParams(kind=a.tokenizer, vocab_size=a.vocab_size),
            work / "tokenizer",
        )
        print(f"tokenizer {ident['kind']}: vocab {ident['vocab_size']}, built in {time.perf_counter() - t0:.1f} s")
        rows = [
            run_size(label, chunks, work / "tokenizer", work / label, a.tokens_per_shard, not a.no_dedup)
            for label, chunks in (("1x", small), ("10x", large))
        ]
    print(
        f"{'size':>4} {'MB':>7} {'chunks':>6} {'docs':>8} {'tokens':>11} {'shards':>6} "
        f"{'tokenize s':>10} {'gather s':>8} {'tokens/s':>10} {'peak RSS MB':>11}"
    )
    for r in rows:
        secs = r["tokenize_s"] + r["gather_s"]
        print(
            f"{r['label']:>4} {r['corpus_mb']:7.1f} {r['chunks']:6d} {r['documents']:8d} {r['tokens']:11,d} "
            f"{r['shards']:6d} {r['tokenize_s']:10.2f} {r['gather_s']:8.2f} {r['tokens'] / secs:10,.0f} "
            f"{r['vmhwm_kb'] / 1024:11.1f}"
        )
    ratio = rows[1]["vmhwm_kb"] / rows[0]["vmhwm_kb"]
    print(f"peak RSS ratio 10x/1x: {ratio:.3f}")
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
