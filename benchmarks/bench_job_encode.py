"""What a job's one encode pays that a warm process does not: in a fresh process per
variant, one embedding job's encode of `--n` synthetic texts, then the same texts
again by a new encoder in the same process (the baseline: everything a process sets up
once is set up). On an H100 the MiniLM shape took 2.65 s for the first encode of
20,000 texts and 1.11 s for the second, with SDPA free to pick cuDNN's attention kernel,
which builds a plan per new batch shape (docs/gpu.md). The variants:

- default       the engine as a job runs it (embedding.cudnn_attention: auto)
- cudnn_on      cudnn_attention: on (SDPA's own choice: cuDNN's kernel where it can)
- cudnn_off     cudnn_attention: off
- bias          attention_bias: on (an encoder's mask passed 4-D: no sync per forward; the
                CUDA default since stop 23)
- nobias        attention_bias: off (the 2-D mask: transformers' builder, a sync per forward)
- buckets       length_buckets: on (a few padded widths: few distinct shapes)
- graphs        cuda_graphs: on (full batches replay a CUDA graph of their shape, captured
                after its first batch: what a job pays for the captures, and gains; for
                the BERT family the CUDA default since stop 31)
- nographs      cuda_graphs: off (the CUDA default before stop 31)
- ids_helper    the tokenizer thread makes the ids lists itself, as before 2026-11-28 (the
                engine now leaves that to the collate thread, so that the tokenizer's next
                call runs meanwhile; `Encoder.ids_on_collate_thread`)

`--repeat K` runs the variants K times, interleaved (each round in the reverse order of
the last), each time in fresh processes, and compares medians.

    python benchmarks/bench_job_encode.py                              # bundled MiniLM, CPU, 1,500 texts
    python benchmarks/bench_job_encode.py --model <folder> --device cuda --n 20000

Prints per variant both encodes and where the host's time went, then
`first/warm encode time ratio (default): <x>`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

VARIANTS = {
    "default": {},
    "cudnn_on": {"cudnn_attention": "on"},
    "cudnn_off": {"cudnn_attention": "off"},
    "bias": {"attention_bias": "on"},
    "nobias": {"attention_bias": "off"},
    "buckets": {"length_buckets": "on"},
    "graphs": {"cuda_graphs": "on"},
    "nographs": {"cuda_graphs": "off"},
    "ids_helper": {},
}
# Engine settings that are not params, set on the encoder after loading.
ATTRS = {"ids_helper": {"ids_on_collate_thread": False}}


def main(argv: list[str] | None = None) -> None:
    from bench_compile_cache import job_parser, run_job

    ap = job_parser(__doc__, n=1500)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of {', '.join(VARIANTS)}")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of all variants, interleaved (medians compared)")
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    if "default" not in names or not set(names) <= set(VARIANTS):
        ap.error(f"--variants: 'default' and any of {', '.join(VARIANTS)}")
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in names}  # (first, warm) seconds
    # Each round in the reverse order of the last: drift falls on every variant alike.
    for name in [n for r in range(max(1, args.repeat)) for n in (names if r % 2 == 0 else names[::-1])]:
        with tempfile.TemporaryDirectory(prefix="job-encode-") as cache:
            s = run_job(args, cache, VARIANTS[name], again=True, attrs=ATTRS.get(name))
        seen[name].append((s["seconds"], s["again_seconds"]))
        for label, k in (("first", ""), ("warm", "again_")):
            print(f"{name:<10} {label:<5} encode {s[k + 'seconds']:6.2f} s = {s[k + 'tokens_per_s']:9.0f} tokens/s, "
                  f"padding {100 * s[k + 'padding_fraction']:4.1f} %; tokenize {s[k + 'tokenize_seconds']:5.2f} s, "
                  f"collate+pin {s[k + 'collate_seconds']:5.2f} s, device loop waited {s[k + 'host_wait_seconds']:5.2f} s, "
                  f"launched {s[k + 'launch_seconds']:5.2f} s, gathered {s[k + 'gather_seconds']:5.2f} s"
                  f"  ({args.n} texts, {args.device})", flush=True)
            if s[k + "cuda_graphs"] == "on" or VARIANTS[name].get("cuda_graphs") == "on":
                print(f"{name:<10} {label:<5} CUDA graphs {s[k + 'cuda_graphs']}: {s[k + 'graph_replays']} of "
                      f"{s[k + 'batches']} batches replayed, {s[k + 'graphs_captured']} shapes captured in "
                      f"{s[k + 'graph_capture_seconds']:.2f} s ({s[k + 'cuda_graphs_reason']})", flush=True)
    first = {name: statistics.median(f for f, _ in runs) for name, runs in seen.items()}
    warm = {name: statistics.median(w for _, w in runs) for name, runs in seen.items()}
    if args.repeat > 1:
        for name in names:
            print(f"{name:<10} medians of {len(seen[name])}: first encode {first[name]:.3f} s, warm {warm[name]:.3f} s")
    for name in names:
        if name != "default":
            print(f"first/warm encode time ratio ({name}): {first[name] / warm[name]:.3f}; its first encode against "
                  f"default's: {first[name] / first['default']:.3f}; its warm encode against default's: "
                  f"{warm[name] / warm['default']:.3f}")
    print(f"first/warm encode time ratio (default): {first['default'] / warm['default']:.3f}")


if __name__ == "__main__":
    main()
