"""Reproduce published CNN/DailyMail ROUGE numbers on the FRANK dev sample.

Data: ../shared/data/cnndm-frank100/dev.jsonl (100 test-split articles with
five systems' stored outputs and FRANK's per-document ROUGE; see
../shared/data/README.md). Never copied into the repo.

(a) The five stored `system_summaries` scored against `highlights` must match
    FRANK's `frank_rouge` (ROUGE-1/2/L F1): every system mean within 0.1 points,
    and >= 95% of (document, system) values within 0.001, for each metric.
(b) Lead-3 with the default `punctuation` splitter (highlights split as
    "tokenised" for ROUGE-Lsum) must land in R-1 40.1-40.4, R-2 17.4-17.6,
    R-Lsum 36.3-36.6. A second row reports the `prose` splitter (abbreviations
    and initials kept whole), which moves Lead-3 up by about 0.2 points.
(c) Extractive MMR (bundled all-MiniLM-L6-v2, k=3, lambda=0.7): reported only.

    .venv/bin/python benchmarks/summarise_reference.py [--data PATH] [--skip-extractive]

Exits 1 if (a) or (b) misses, 2 if the data file is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from shardflow.summarise.data import load_documents, read_summaries
from shardflow.summarise.lead import lead_k
from shardflow.summarise.params import ScoreParams
from shardflow.summarise.rouge import score_records, system_means

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cnndm-frank100" / "dev.jsonl"
SYSTEMS = ("bart", "pgn", "bert_sum", "bus", "s2s")
FRANK_METRICS = ("rouge1", "rouge2", "rougeL")
MEAN_TOLERANCE = 0.1  # points (F1 x 100)
DOC_TOLERANCE = 0.001  # F1 fraction
DOC_SHARE = 0.95
LEAD3_TARGET = {"rouge1": (40.1, 40.4), "rouge2": (17.4, 17.6), "rougeLsum": (36.3, 36.6)}
# CNN/DailyMail highlights and system outputs are tokenised ("... Friday . The club ...").
CNNDM = ScoreParams(reference_format="tokenised", summary_format="tokenised")



def frank_check(path: str) -> tuple[list[str], bool]:
    """(a): report lines and whether it passed."""
    frank = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            frank[obj["id"]] = obj["frank_rouge"]
    scores = score_records(read_summaries(path, "system_summaries.*").loaded().records, CNNDM)
    ours = scores.set_index(["id", "system"])
    lines = [f"{'system':10} {'metric':8} {'ours':>7} {'FRANK':>7} {'diff':>6} {'docs<=0.001':>11}"]
    passed = True
    for system in SYSTEMS:
        for metric in FRANK_METRICS:
            ids = list(frank)
            theirs = np.array([frank[i][system][metric] * 100 for i in ids])
            mine = np.array([ours.loc[(i, system), metric] for i in ids])
            diff = abs(mine.mean() - theirs.mean())
            share = float(np.mean(np.abs(mine - theirs) / 100 <= DOC_TOLERANCE))
            ok = diff <= MEAN_TOLERANCE and share >= DOC_SHARE
            passed &= ok
            lines.append(
                f"{system:10} {metric:8} {mine.mean():7.2f} {theirs.mean():7.2f} {diff:6.3f} "
                f"{share:10.0%} {'ok' if ok else 'MISS'}"
            )
    lsum = scores.groupby("system", sort=False)["rougeLsum"].mean()
    lines.append("ROUGE-Lsum (not published by FRANK): " + ", ".join(f"{s} {lsum[s]:.2f}" for s in SYSTEMS))
    return lines, passed


def _score_summaries(docs, summaries: list[list[str]], system: str):
    from shardflow.summarise.data import SummaryRecord

    # Candidates are lists of sentences already; only the reference needs splitting.
    records = [SummaryRecord(d.id, d.reference, {system: s}, d.line) for d, s in zip(docs, summaries, strict=True)]
    return score_records(records, ScoreParams(reference_format="tokenised"))


def _row(name: str, scores, target=None) -> tuple[str, bool]:
    means = system_means(scores, ScoreParams()).set_index("metric")
    cells, ok = [], True
    for metric in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        m = means.loc[metric]
        cells.append(f"{m['mean']:6.2f} [{m['ci_low']:5.2f},{m['ci_high']:5.2f}]")
        if target and metric in target:
            lo, hi = target[metric]
            ok &= lo <= m["mean"] <= hi
    return f"{name:36} " + "  ".join(cells), ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--skip-extractive", action="store_true", help="skip (c), which loads MiniLM")
    args = ap.parse_args()
    if not os.path.exists(args.data):
        print(f"data file {args.data} not found (see ../shared/data/README.md)", file=sys.stderr)
        return 2

    print("(a) stored system summaries vs FRANK frank_rouge (F1 x 100)")
    lines, a_ok = frank_check(args.data)
    print("\n".join(lines))

    docs = load_documents(args.data).records
    header = f"{'':36} " + "  ".join(f"{m:>19}" for m in ("R-1 [95% CI]", "R-2", "R-L", "R-Lsum"))
    print(f"\n(b, c) on {len(docs)} articles, F1 x 100, bootstrap 95% CI (1000 resamples, seed 0)")
    print(header)
    lead = [lead_k(d.article, 3, "punctuation") for d in docs]
    row, b_ok = _row("Lead-3 (punctuation splitter)", _score_summaries(docs, lead, "lead3"), LEAD3_TARGET)
    print(row, "ok" if b_ok else "MISS")
    print(" " * 37 + "target R-1 40.1-40.4, R-2 17.4-17.6, R-Lsum 36.3-36.6")
    prose = [lead_k(d.article, 3, "prose") for d in docs]
    print(_row("Lead-3 (prose splitter)", _score_summaries(docs, prose, "prose"))[0])
    differ = sum(a != b for a, b in zip(lead, prose, strict=True))
    print(" " * 37 + f"{differ} articles get a different Lead-3 from the two splitters")

    if not args.skip_extractive:
        from shardflow.core.models import resolve_model
        from shardflow.embed.engine import EmbedParams, load_encoder
        from shardflow.summarise.extractive import extractive_summaries

        t0 = time.perf_counter()
        enc = load_encoder(EmbedParams(model=resolve_model("default"), device="cpu", threads=1))
        ext = extractive_summaries([d.article for d in docs], enc, k=3, mmr_lambda=0.7)
        took = time.perf_counter() - t0
        print(_row("Extractive MMR (MiniLM, k=3, l=0.7)", _score_summaries(docs, ext, "mmr"))[0])
        print(" " * 37 + f"({took:.1f} s including model load, 1 CPU thread)")

    print(f"\n(a) {'pass' if a_ok else 'FAIL'}  (b) {'pass' if b_ok else 'FAIL'}")
    return 0 if a_ok and b_ok else 1


if __name__ == "__main__":
    sys.exit(main())
