"""What a train job records and gives the trainer (job_params): Snakemake reruns a
finished job whose recorded params changed."""

import pytest

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


def test_a_decay_that_ends_by_the_end_of_the_warmup_is_refused_naming_both_keys():
    """lr_at warms up to step warmup_iters, then gives min_lr from lr_decay_iters on: a decay
    ending there or before drops from the warmup straight to min_lr, and lr is never used."""
    for decay in (50, 100):
        with pytest.raises(ValueError, match=rf"lr_decay_iters \({decay}\) must be above warmup_iters \(100\)"):
            TrainParams(warmup_iters=100, lr_decay_iters=decay)
    assert TrainParams(warmup_iters=100, lr_decay_iters=101).decay_iters == 101
    assert TrainParams(warmup_iters=0, lr_decay_iters=1).decay_iters == 1
    # null follows max_iters: a run that stops inside the warmup (a short measuring run,
    # max_iters 10 under the default warmup of 100) is the warmup's first steps, as under
    # any schedule, and stays accepted; so does a decay that outlasts the run.
    assert TrainParams(max_iters=10, warmup_iters=100).decay_iters == 10
    assert TrainParams(max_iters=100, warmup_iters=100).decay_iters == 100
    assert TrainParams(max_iters=10, warmup_iters=5, lr_decay_iters=200).decay_iters == 200


def test_dropout_of_one_is_refused():
    """At 1 every activation is dropped in training (nn.Dropout and the attention's
    dropout_p give zeros): the logits never see the input, the run trains a unigram model
    and finishes without a word. torch accepts p = 1, so TrainParams holds the range to [0, 1)."""
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        TrainParams(dropout=1.0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got -0.1"):
        TrainParams(dropout=-0.1)
    assert TrainParams(dropout=0.99).dropout == 0.99
