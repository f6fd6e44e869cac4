"""Throughput of the abstractive engine against a plain `model.generate` loop, same process.

Methods, same model, same texts, same generation settings, run in interleaved
rounds, each in the reverse order of the last (medians reported, so a noisy neighbour
on the machine hits both alike):

- engine   shardflow.summarise.generate (length-sorted token-budget batches)
- plain    `model.generate` on batches of 8 texts in input order, padded to the
           longest of each batch (the loop one writes by hand)

The model is a random BART built offline like the tests' (tests/support/
tiny_generators.py) but larger (d_model 256, 4 layers, 512 positions); the texts
are a sample of the workflow's demo corpus (stdlib docstrings, from a few words
to past the 512-token limit). Random weights: the summaries are noise, but the
work (encoder over the input, one decoder step per output token, rows that end
at different steps) is a real model's. Both methods must produce the same
summaries; the script checks it.

    python benchmarks/bench_summarise.py            # CPU: 96 texts, 3 rounds, ~2 minutes on 2 cores

The last line is exactly `engine/plain throughput ratio: <x>`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, when run from anywhere

SIZES = {"d_model": 256, "layers": 4, "heads": 4, "ffn": 1024, "positions": 512}


def plain_loop(model, tokenizer, texts: list[str], batch_size: int, limit: int, **generate_kwargs) -> list[str]:
    import torch

    out = []
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(
                texts[i : i + batch_size], padding=True, truncation=True, max_length=limit, return_tensors="pt"
            )
            seqs = model.generate(**enc, **generate_kwargs)
            out.extend(s.strip() for s in tokenizer.batch_decode(seqs, skip_special_tokens=True))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=96, help="texts per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--num-beams", type=int, default=1)
    ap.add_argument("--plain-batch-size", type=int, default=8)
    ap.add_argument("--token-budget", type=int, default=None, help="engine budget (default: its CPU default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    import transformers

    from shardflow.corpus.demo import DemoParams, build_demo_corpus
    from shardflow.summarise.generate import GenerateParams, load_generator
    from tests.support import tiny_generators

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        corpus = Path(tmp) / "demo.jsonl"
        build_demo_corpus(str(corpus), DemoParams())
        texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
        random.Random(args.seed).shuffle(texts)  # a sample across the whole stdlib
        texts = texts[: args.n]
        folder = tiny_generators.build_bart(Path(tmp), sizes=SIZES)
        setup_s = time.perf_counter() - t0

        settings = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
        gen = load_generator(
            GenerateParams(
                model=str(folder), device="cpu", threads=args.threads, token_budget=args.token_budget, **settings
            )
        )
        tok, model = gen.tokenizer, gen.model
        lengths = sorted(len(x) for x in gen.encode(texts)[0])
        print(
            f"# {len(texts)} demo texts, input tokens min {lengths[0]} median {lengths[len(lengths) // 2]} "
            f"max {lengths[-1]} (limit {gen.input_limit}); BART d_model {SIZES['d_model']} x {SIZES['layers']} layers; "
            f"{settings}; torch {torch.__version__}, {torch.get_num_threads()} threads; setup {setup_s:.0f} s",
            flush=True,
        )
        # Warm-up (first-call allocations, lazy imports), then interleaved rounds.
        gen.summarise(texts[:8])
        plain_loop(model, tok, texts[:8], args.plain_batch_size, gen.input_limit, **settings)
        rates: dict[str, list[float]] = {"engine": [], "plain": []}
        same = None
        methods = {
            "engine": lambda: gen.summarise(texts),
            "plain": lambda: plain_loop(model, tok, texts, args.plain_batch_size, gen.input_limit, **settings),
        }
        out = {}
        for r in range(args.rounds):
            # Each round reverses the last one's order: drift on a shared machine then
            # falls on both methods alike instead of always on the one that runs second.
            for name in methods if r % 2 == 0 else reversed(list(methods)):
                t = time.perf_counter()
                out[name] = methods[name]()
                rates[name].append(len(texts) / (time.perf_counter() - t))
            same = sum(a["summary"] == b for a, b in zip(out["engine"], out["plain"], strict=True))
            print(f"# round {r + 1}: engine {rates['engine'][-1]:.2f}/s, plain {rates['plain'][-1]:.2f}/s", flush=True)
        stats = gen.last_stats.as_dict()
        print(
            f"# engine: {stats['batches']} batches, {100 * stats['padding_fraction']:.0f}% input padding, "
            f"{stats['output_tokens']} output tokens; identical summaries: {same}/{len(texts)}"
        )
        for name in ("engine", "plain"):
            label = (
                "engine (sorted, token budget)"
                if name == "engine"
                else f"plain generate, batches of {args.plain_batch_size}"
            )
            print(f"{label:<32} {statistics.median(rates[name]):7.2f} texts/s")
        ratio = statistics.median(e / p for e, p in zip(rates["engine"], rates["plain"], strict=True))
        print(f"engine/plain throughput ratio: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
