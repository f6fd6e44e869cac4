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


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # one case a field; each raised Python's bare TypeError ('<', '%') or was kept: a true string compiles
        ({"n_head": "4"}, "n_head '4': expected an integer"),
        ({"batch_size": "12"}, "batch_size '12': expected an integer"),
        ({"lr": "1e-3"}, "lr '1e-3': expected a number"),
        ({"dropout": None}, "dropout None: expected a number"),
        ({"compile": "false"}, "compile 'false': expected a bool"),
        ({"bias": 0}, "bias 0: expected a bool"),
        ({"seed": None}, "seed None: expected an integer"),
        ({"n_layer": 2.5}, "n_layer 2.5: expected an integer"),
        ({"lr_decay_iters": 500.5}, "lr_decay_iters 500.5: expected an integer or None"),
        ({"eval_windows": True}, "eval_windows True: expected an integer or a string"),
        ({"device": None}, "device None: expected a string"),
        ({"compile_cache": 5}, "compile_cache 5: expected a string or None"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        TrainParams(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize("device", ["gpu", "CUDA", "cuda:", "cuda:x", "cuda "])
def test_a_device_the_trainer_cannot_use_is_refused_listing_the_choices(device):
    """Any string was kept until torch.device refused it in the trainer."""
    with pytest.raises(ValueError) as info:
        TrainParams(device=device)
    assert str(info.value) == f"device {device!r}: expected auto, cpu, cuda or cuda:N"


def test_every_device_the_trainer_takes_is_accepted():
    assert [TrainParams(device=d).device for d in ("auto", "cpu", "cuda", "cuda:1")] == ["auto", "cpu", "cuda", "cuda:1"]


def test_whole_floats_are_ints():
    """The schema's "integer" takes 200.0: eval_windows was refused as no int, and n_layer,
    block_size or seed stopped the job in torch ('float' object cannot be interpreted as an
    integer) after the data preparation."""
    p = TrainParams(n_layer=2.0, block_size=16.0, seed=3.0, eval_windows=200.0, lr_decay_iters=500.0)
    got = [(v, type(v)) for v in (p.n_layer, p.block_size, p.seed, p.eval_windows, p.lr_decay_iters)]
    assert got == [(2, int), (16, int), (3, int), (200, int), (500, int)]
    assert (p.dropout, type(p.dropout)) == (0.0, float) and TrainParams(lr=1).lr == 1  # float fields keep their value
    assert TrainParams(eval_windows="all").eval_windows == "all"


def test_the_params_module_imports_no_torch():
    """The workflow checks TrainParams when it parses the config: its device check comes
    from core.fields, not core.devices (which imports torch)."""
    import subprocess
    import sys

    code = "import sys, shardflow.train.params; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize(("key", "value"), [("grad_clip", -1.0), ("weight_decay", -0.1), ("lr", 0.0), ("lr", -1e-3)])
def test_values_the_schema_refuses_are_refused_by_hand_too(key, value):
    """`python -m shardflow.train` run by hand bypasses the config schema: a negative
    grad_clip turned clipping off without a word (only 0 means off), a negative weight
    decay grew the weights, and a learning rate of 0 or below trained nothing."""
    with pytest.raises(ValueError, match=rf"^{key} must be "):
        TrainParams(**{key: value})
