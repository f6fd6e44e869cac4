"""Lead-k and extractive summaries of one chunk: sentences chosen, not generated.

The chunk is processed in windows of `params.window` documents; each finished
window is saved as a records part (`core.parts`), so a killed job resumes where it
stopped, as embed and abstractive jobs do. The part folder's name is a hash of the
chunk's bytes and path and everything that decides the output (method, k, lambda,
splitter, and for `extractive` the encoder's identity), so a changed setting never
picks up stale parts.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from shardflow.core import controller
from shardflow.core.devices import peak_memory, reset_peak_memory
from shardflow.core.hashing import digest, texts_fingerprint
from shardflow.core.parts import (
    FORMAT_VERSION,
    PartStore,
    configured,
    job_identity,
    remove_job_parts,
    resume_folder,
    resume_key,
)
from shardflow.corpus.chunks import read_chunk
from shardflow.summarise.params import SummariseParams
from shardflow.summarise.pipeline import summarise_texts
from shardflow.summarise.records import write_summaries

log = logging.getLogger(__name__)


def _words(text: str) -> int:
    return len(text.split())


def select_chunk(
    chunk_path: str | Path,
    out_path: str | Path,
    params: SummariseParams,
    resume_root: str | Path,
    logger: logging.Logger | None = None,
    *,
    encoder: Any = None,
) -> dict[str, Any]:
    """Summarise one chunk file with `lead` or `extractive` into a summaries file; return
    run statistics (with `extractive` on a GPU, the peak GPU memory from this call on,
    the loaded encoder's weights included: core.devices.peak_memory, null on the CPU)."""
    logger = logger or log
    running = controller.find()  # the Snakemake that records this job's outputs
    device = str(getattr(encoder, "device", "cpu"))
    reset_peak_memory(device)
    start_unix, t0 = time.time(), time.perf_counter()
    ids, texts = read_chunk(chunk_path)
    identity = {
        "format": FORMAT_VERSION,
        "params": {k: v for k, v in params.__dict__.items() if k != "window"},
        "window": params.window,
        "encoder": getattr(encoder, "identity", None),
    }
    folder = resume_folder(resume_root, resume_key(chunk_path, identity))
    manifest = {"n_texts": len(texts), "texts_sha256": texts_fingerprint(texts), "identity": digest(identity)}
    # An encoder that does not say its settings (less its hardware) is named by its whole
    # identity: its killed attempts on other hardware are then left, not counted.
    encoder_settings = getattr(encoder, "settings", getattr(encoder, "identity", None))
    job = job_identity(out_path, chunk_path, configured(params, encoder_settings))
    store = PartStore(folder, manifest, device=device, job=job).open()
    records: list[dict] = []
    resumed = generated = 0
    for part, a in enumerate(range(0, len(texts), params.window)):
        window = texts[a : a + params.window]
        done = store.load_records(part, len(window))
        if done is None:
            sentences = summarise_texts(window, params, encoder)
            done = [
                {
                    "summary": "\n".join(s),
                    "input_tokens": _words(text),
                    "output_tokens": sum(_words(x) for x in s),
                    "truncated": False,
                }
                for text, s in zip(window, sentences, strict=True)
            ]
            store.save_records(part, done)
            generated += len(window)
        else:
            resumed += 1
        records.extend(done)
        logger.info("summarised %d/%d documents", len(records), len(texts))
    controller.stop_if_gone(running, f"the finished parts are kept in {folder}")
    # The killed attempts before this one, read before the output is written: an error
    # reading them then fails the job before it has an output Snakemake would delete.
    attempts = store.attempt_totals()
    write_summaries(out_path, ids, records)
    # Their records go with the parts (those in the folders of its other hardware too:
    # the extractive encoder's identity names it).
    earlier = remove_job_parts(folder, resume_root, job, start_unix, attempts)
    seconds = time.perf_counter() - t0
    return {
        "items": len(texts),
        "input_tokens": sum(r["input_tokens"] for r in records),
        "output_tokens": sum(r["output_tokens"] for r in records),
        "truncated": 0,
        "items_generated": generated,  # the rest came from an earlier attempt's parts
        "resumed_parts": resumed,
        "seconds": seconds,
        "items_per_s": generated / max(seconds, 1e-9),
        "start_unix": start_unix,
        "end_unix": time.time(),
        "device": device,
        "method": params.method,
        **peak_memory(device),
        **earlier,
    }
