"""What the compiled path's fixed shapes cost in padding, without running a model: the
engine's own producer (tokenize, sort groups, batch plan, collate) on CPU, with the
CUDA token budget, summing the tokens each configuration would compute.

    python benchmarks/bench_bucket_padding.py                      # bundled MiniLM, demo + synthetic
    python benchmarks/bench_bucket_padding.py --model <kit qwen3 folder> --texts synthetic --n 4000

Baseline: length-sorted batches each as wide as their longest row (eager, and compile
with dynamic shapes). Against it: `length_buckets` (compile's static shapes: widths
rounded up to a bucket, the last batch of a window filled with filler rows), the fine
widths of `cuda_graphs` (`graph_length_buckets`; a group's part batch at its own shape) and packing
(packed lengths rounded up to quarters of the budget, as with flex attention). Also the sorted batches
with each window tokenized and sorted whole, as before `core.batching.sort_groups` cut windows
in two bands. Prints padding per configuration, `buckets/sorted computed-token ratio:
<x>` (above 1: the buckets make the device compute that much more per real token) and
`bands/whole-window computed-token ratio: <x>`.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]


def computed_tokens(encoder, texts: list[str]) -> tuple[int, int, int]:
    """(real tokens, tokens computed, distinct batch shapes) of one encode's batches."""
    from shardflow.embed.engine import EncodeStats, _Ready

    n, win = len(texts), encoder.params.window
    windows = [(w, a, min(a + win, n)) for w, a in enumerate(range(0, n, win))]
    out: queue.Queue = queue.Queue()
    encoder._produce(texts, windows, out, threading.Event(), EncodeStats())
    real = padded = 0
    shapes = set()
    while not out.empty():
        item = out.get()
        if isinstance(item, _Ready):
            real += int(item.batch.lengths.sum())
            padded += item.batch.padded_tokens
            shapes.add(tuple(item.batch.input_ids.shape))
        elif hasattr(item, "error"):
            raise item.error
    return real, padded, len(shapes)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    ap.add_argument("--texts", default="demo,synthetic", help="demo, synthetic or both")
    ap.add_argument("--n", type=int, default=None, help="texts (default: 3000 demo, 20000 synthetic)")
    ap.add_argument("--token-budget", type=int, default=32768, help="the CUDA default")
    ap.add_argument("--window", type=int, default=4096, help="the config default")
    args = ap.parse_args(argv)

    from bench_engine import demo_texts, model_or_bundled, synthetic_texts
    from bench_first_batch import sorting

    from shardflow.core.batching import graph_length_buckets
    from shardflow.embed import EmbedParams, accel, load_encoder, load_model_spec
    from shardflow.embed.graphs import ShapeGraphs

    model = model_or_bundled(args.model)
    mtype = accel.model_type(accel.model_config(load_model_spec(model).transformer_folder))

    def encoder_for(name: str):
        buckets = {"buckets": "on", "graph widths": "on"}.get(name, "off")
        enc = load_encoder(EmbedParams(model=model, device="cpu", token_budget=args.token_budget, window=args.window,
                                       packing="off", kernels="off", length_buckets=buckets))
        if name == "packed":  # packed rows as flex attention pads them on CUDA (no kernel runs here)
            enc.setup_accel(mtype, accel.Choice("flex_attention", "as on CUDA"), accel.Choice("off", ""))
        if name == "graph widths":  # cuda_graphs: on, as on CUDA (no forward runs here, so no graph either)
            enc.buckets = graph_length_buckets(enc.max_length)
            enc.graphs = ShapeGraphs(enc._graph_forward, None, enc.logger)
        return enc

    encoders = {name: encoder_for(name) for name in ("sorted", "buckets", "graph widths", "packed")}
    for kind in args.texts.split(","):
        n = args.n or (3000 if kind == "demo" else 20000)
        texts = demo_texts(None, n, 0) if kind == "demo" else synthetic_texts(n, 0)
        got = {name: computed_tokens(enc, texts) for name, enc in encoders.items()}
        with sorting():  # the baseline: each window sorted whole
            got["whole window"] = computed_tokens(encoders["sorted"], texts)
        real = got["sorted"][0]
        limit = encoders["sorted"].max_length
        for name, (r, padded, shapes) in got.items():
            assert r == real, (name, r, real)
            print(f"{kind:<9} {name:<12} computes {padded:>10,} tokens for {real:,} real: padding "
                  f"{100 * (1 - real / padded):5.1f} %, {shapes} batch shapes  ({n} texts, max length {limit}, "
                  f"budget {args.token_budget}, window {args.window})")
        print(f"{kind} buckets/sorted computed-token ratio: {got['buckets'][1] / got['sorted'][1]:.3f}")
        print(f"{kind} graph-widths/sorted computed-token ratio: {got['graph widths'][1] / got['sorted'][1]:.3f}")
        print(f"{kind} packed/sorted computed-token ratio: {got['packed'][1] / got['sorted'][1]:.3f}")
        print(f"{kind} bands/whole-window computed-token ratio: {got['sorted'][1] / got['whole window'][1]:.4f}")


if __name__ == "__main__":
    main()
