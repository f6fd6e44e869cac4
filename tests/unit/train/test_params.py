"""What a train job records and gives the trainer (job_params): Snakemake reruns a
finished job whose recorded params changed."""

from shardflow.train.params import TrainParams, job_params

SECTION = {"n_layer": 2, "lr": 1e-3, "compile": True, "compile_cache": "/c", "checkpoint_interval": 7,
           "gpus": 1, "sample_tokens": 40}


def test_compile_is_recorded_false_where_the_jobs_run_on_the_cpu():
    """The trainer compiles on CUDA only: with gpu_jobs.device cpu the key changes no
    output, so it must not rerun a finished job. Under auto or cuda it stays as given."""
    assert job_params(SECTION, "cpu")["compile"] is False
    assert job_params({**SECTION, "compile": False}, "cpu") == job_params(SECTION, "cpu")
    assert job_params(SECTION, "auto")["compile"] is True and job_params(SECTION, "cuda:1")["compile"] is True


def test_untracked_keys_sample_tokens_and_one_gpu_are_left_out():
    assert job_params(SECTION, "auto") == {"n_layer": 2, "lr": 1e-3, "compile": True}
    assert job_params({**SECTION, "gpus": 2}, "auto")["gpus"] == 2  # another global batch: another run
    TrainParams(**job_params(SECTION, "cpu"))  # every key is a field
