"""Logging for rule scripts: everything goes to the rule's `log:` file.

The first line records the resolved parameters and what the job ran on, so a
log read months later says exactly how its output was made.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import re
import socket
import sys
from importlib import metadata

# The optional kernel and search packages too: where installed, they are used by default
# (liger-kernel's fused kernels, flash-attn's varlen attention, faiss) and move output bits.
# rouge-score makes every ROUGE number, with nltk's Porter stemmer (a word stemmed otherwise
# moves a score).
PACKAGES = ("shardflow", "numpy", "torch", "transformers", "tokenizers", "sentence-transformers", "pyarrow", "snakemake",
            "liger-kernel", "flash-attn", "faiss-cpu", "faiss-gpu", "rouge-score", "nltk")


def package_versions(names=PACKAGES) -> dict:
    out = {"python": sys.version.split()[0]}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def recorded_package(name: str) -> str | None:
    """The key package_versions records package `name` under (or "python"), however `name`
    is spelt: case and runs of '-', '_' and '.' do not tell packages apart (PEP 503), so
    `sentence_transformers` is sentence-transformers. None for one it does not record."""
    def normal(text: str) -> str:
        return re.sub(r"[-_.]+", "-", text).lower()

    return next((known for known in ("python", *PACKAGES) if normal(known) == normal(name)), None)


def host_info() -> dict:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


# How the line that ends a failed job's log starts, after its time, level and logger
# name: `failed: <error type>: <message>` (make status reads it: shardflow.workflow.status).
FAILED = "failed: "
# How far back from a log's end that line is looked for: the traceback and output after
# it can be far longer than the line (a torch.compile error; a torchrun job's log holds
# every rank's traceback and torchrun's summary after it), and a running job's long log,
# which holds no such line, costs at most this much per look. make status reads that much
# of a local log (status.log_error) and fetches that much of a log in S3
# (shardflow.workflow.mirror): one number, so the two read the same lines.
LOG_SCAN = 16 * 1024 * 1024


def share_tokenizer_threads(threads: int | None = None) -> None:
    """Keep the `tokenizers` library's thread pool to the job's CPU share: unless
    RAYON_NUM_THREADS says otherwise, the pool is as wide as the machine (a one-thread
    tokenize job ran three threads on 2 cores; on a 64-core host 64 such jobs would run
    4,096). `threads`: the job's; else the OMP_NUM_THREADS Snakemake sets for every job
    from its `threads`. Read when the pool starts, at the first parallel encode: call it
    before. A value already in the environment is kept."""
    n = threads if threads is not None else os.environ.get("OMP_NUM_THREADS")
    if n is not None:
        os.environ.setdefault("RAYON_NUM_THREADS", str(n))


def _log_uncaught(logger: logging.Logger) -> None:
    """Put a script's fatal traceback into its rule log too, not only on stderr."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, KeyboardInterrupt):
            logger.critical(FAILED + "%s: %s", exc_type.__name__, exc, exc_info=(exc_type, exc, tb))
            for handler in logger.handlers + logging.getLogger().handlers:
                handler.flush()
            return  # the handlers (stderr included) have printed it
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def configure_logging(log_path: str | None, name: str, params=None) -> logging.Logger:
    """Send all logging to `log_path` (and stderr), then log params + software + host."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w", encoding="utf-8"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    logging.captureWarnings(True)
    logger = logging.getLogger(name)
    _log_uncaught(logger)
    resolved = dataclasses.asdict(params) if dataclasses.is_dataclass(params) else params
    logger.info(
        "params=%s software=%s host=%s",
        json.dumps(resolved, default=str, sort_keys=True),
        json.dumps(package_versions(), sort_keys=True),
        json.dumps(host_info(), sort_keys=True),
    )
    return logger
