"""Rule verify: merged embeddings vs the manifest and the model -> verification.json."""

from shardflow.core.atomic import write_json
from shardflow.core.files import read_json
from shardflow.core.models import resolve_model
from shardflow.core.runlog import configure_logging
from shardflow.embed.stconfig import load_model_spec, output_dim
from shardflow.embed.verify import VerificationError, VerifyParams, failure_message, verify_embeddings

smk = snakemake  # noqa: F821 - injected by Snakemake
manifest = read_json(smk.input.manifest)
spec = load_model_spec(resolve_model(smk.params.model))
params = VerifyParams(
    expected_records=manifest["total_records"],
    expected_dim=output_dim(spec),
    normalized=spec.normalize,
    norm_tolerance=smk.params.norm_tolerance,
)
log = configure_logging(smk.log[0], "verify", params)
result = verify_embeddings(smk.input.npy, smk.input.ids, params, manifest["chunks"], smk.params.embed_log)
if not result["ok"]:
    write_json(smk.params.failed_json, result)
    raise VerificationError(failure_message(result, smk.input.npy) + f"\n(details: {smk.params.failed_json})")
write_json(smk.output[0], result)
log.info("verification passed: %d rows x %d", result["rows"], result["dim"])
