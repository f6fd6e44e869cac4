"""expand_and_name(n): what an n-point sweep costs at parse time and DAG building.

Parse the sweep, name every point, and build every job's params (`job_config`), as a
workflow does in every Snakemake invocation (remote jobs included). Not a test: run
it and read the seconds, e.g. `python -m shardflow.sweep.bench 1000`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from shardflow.sweep.spec import parse_sweeps


def _grid(n: int) -> dict[str, list]:
    """A three-parameter grid of at least n points (10 x 10 x ceil(n / 100) for n = 1000)."""
    a = b = 10 if n >= 100 else max(1, round(n ** (1 / 3)))
    c = -(-n // (a * b))
    return {
        "train.lr": [round(1e-4 * (i + 1), 6) for i in range(a)],
        "train.n_layer": list(range(1, b + 1)),
        "train.dropout": [round(0.01 * i, 2) for i in range(c)],
    }


def expand_and_name(n: int, config: dict | None = None, schema_validate: Callable[[dict], Any] | None = None,
                    seeds: int = 1) -> dict:
    """Seconds to parse, name and build the params of an (at least) n-point train sweep."""
    config = config or {"train": {"lr": 1e-3, "n_layer": 4, "dropout": 0.0, "seed": 0}}
    validate = schema_validate or (lambda cfg: None)
    sweeps = {"bench": {"stage": "train", "grid": _grid(n), "seeds": list(range(seeds)),
                        "metrics": {"best_val_loss": "min"}}}
    t0 = time.perf_counter()
    spec = parse_sweeps(sweeps, config, validate)["bench"]
    t1 = time.perf_counter()
    configs = [spec.job_config(pid, seed) for pid, seed in spec.jobs()]
    t2 = time.perf_counter()
    return {"points": len(spec.ids), "jobs": len(configs), "parse_s": t1 - t0, "job_params_s": t2 - t1,
            "total_s": t2 - t0, "longest_id": max(map(len, spec.ids))}


if __name__ == "__main__":
    print(expand_and_name(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
