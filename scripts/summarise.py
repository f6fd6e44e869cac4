"""Rule summarise: one chunk -> summaries (.jsonl) + stats (.json), by summarise.method."""

from shardflow.core.gpujob import start_gpu_job

smk = snakemake  # noqa: F821 - injected by Snakemake
cfg = dict(smk.params.summarise)
job = start_gpu_job(smk, "summarise", {"summarise": cfg, "input": smk.input[0]})

from shardflow.core.atomic import write_json  # noqa: E402 - after pinning (start_gpu_job)
from shardflow.core.models import resolve_model  # noqa: E402
from shardflow.core.s3 import logical_path  # noqa: E402

method = cfg["method"]
if method == "abstractive":
    from shardflow.summarise.generate import summarise_chunk
    from shardflow.summarise.generate_params import params_from_dict

    if not cfg["model"]:
        raise ValueError("summarise.method abstractive needs summarise.model (a local model folder)")
    keys = ("dtype", "token_budget", "max_batch_size", "max_input_length", "prefix", "prompt", "seed", "window")
    params = params_from_dict(
        {"model": resolve_model(cfg["model"]), "device": job.device, "threads": job.threads}
        | {k: cfg[k] for k in keys}
        | {k: v for k, v in cfg["generation"].items() if v is not None}
    )
    stats = summarise_chunk(smk.input[0], smk.output.summaries, params, smk.params.resume_root, job.log)
else:
    from shardflow.summarise.params import SummariseParams
    from shardflow.summarise.select import select_chunk

    params = SummariseParams(**{k: cfg[k] for k in ("method", "k", "mmr_lambda", "splitter", "window") if k in cfg})
    encoder = None
    if method == "extractive":
        from shardflow.embed.engine import EmbedParams, load_encoder

        encoder = load_encoder(EmbedParams(model=resolve_model(cfg["encoder"]), device=job.device, threads=job.threads), job.log)
    stats = select_chunk(smk.input[0], smk.output.summaries, params, smk.params.resume_root, job.log, encoder=encoder)
# The report reads these names (as for embed jobs).
stats.update(chunk=int(smk.wildcards.chunk), input=logical_path(smk.input[0]), start_time=stats["start_unix"], end_time=stats["end_unix"])
from shardflow.workflow.provenance import made_with  # noqa: E402

role, model = {"abstractive": ("summarise", cfg.get("model")), "extractive": ("summarise_encoder", cfg.get("encoder"))}.get(
    method, ("summarise", None)
)  # the roles of shardflow.workflow.tasks.models
stats["made_with"] = made_with(role, resolve_model(model) if model else None, stats.get("device", job.device), job.threads)
write_json(smk.output.stats, stats)
job.log.info("done: %s", stats)
