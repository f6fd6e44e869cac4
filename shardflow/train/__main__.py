"""`python -m shardflow.train`: train a GPT from token shards, alone or under torchrun.

    python -m shardflow.train --data results/x/shards --out results/x/train/model \\
        --params '{"n_layer": 4, "max_iters": 2000}' --max-iters 500 --log logs/train/x.log
    torchrun --standalone --nproc_per_node 2 -m shardflow.train --data ... --out ...

Every TrainParams field is a flag (`--batch-size 12`, `--compile true`,
`--eval-windows all`); `--params` takes a JSON object of them first, flags override.
Under torchrun (WORLD_SIZE > 1) the processes form one data-parallel group: nccl on
CUDA, gloo on CPU. Only rank 0 logs to the file and writes outputs. A rank the train
launcher started writes the error that ends it where the launcher reads it
(shardflow.core.failures.reporting_rank_error: a retry then repeats no input error, and
one after running out of memory takes a smaller micro-batch, given by `--out-of-memory`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import typing

import torch
import torch.distributed as dist

from shardflow.core import controller, failures
from shardflow.core.fields import whole_int
from shardflow.core.runlog import configure_logging
from shardflow.train.trainer import TrainParams, train


def _parse_value(field: dataclasses.Field, text: str):
    hint = typing.get_type_hints(TrainParams)[field.name]
    # An int field takes a whole float too (`--checkpoint-interval 10.0`): the train rule
    # passes train.checkpoint_interval as the config gives it.
    if field.name == "eval_windows":
        return text if text == "all" else whole_int(text)
    optional = [t for t in typing.get_args(hint) if t is not type(None)]
    if type(None) in typing.get_args(hint) and len(optional) == 1:  # `int | None`, `str | None`
        if text.lower() in ("none", "null"):
            return None
        return whole_int(text) if optional[0] is int else optional[0](text)
    if hint is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise argparse.ArgumentTypeError(f"--{field.name}: expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    return whole_int(text) if hint is int else hint(text)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m shardflow.train", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="shard folder or its metadata.json")
    ap.add_argument("--out", required=True, help="output folder (checkpoints, losses, report files)")
    ap.add_argument("--resume-dir", help="checkpoint folder (default: <out>/../<out name>.resume)")
    ap.add_argument("--tokenizer", help="saved tokenizer folder, to decode the sample text")
    ap.add_argument("--log", help="log file (rank 0)")
    ap.add_argument("--threads", type=whole_int, help="torch CPU threads per process")
    ap.add_argument("--keep-resume", action="store_true", help="keep the checkpoint folder after finishing")
    ap.add_argument("--sample-tokens", type=whole_int, default=500, help="tokens of the generated sample")
    ap.add_argument("--params", default="{}", help="JSON object of TrainParams fields")
    ap.add_argument("--out-of-memory", type=json.loads, help="JSON: the out-of-memory details an earlier attempt "
                    "recorded (the train launcher passes them): on that GPU type, a smaller micro-batch")
    for f in dataclasses.fields(TrainParams):
        ap.add_argument("--" + f.name.replace("_", "-"), dest=f.name, metavar=f.name.upper(),
                        type=lambda text, f=f: _parse_value(f, text), default=argparse.SUPPRESS,
                        help=f"default {f.default!r}")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    values = json.loads(args.params)
    # The workflow records train.gpus there where it is not 1 (another count is another
    # run). It is not a TrainParams field: torchrun starts that many processes, and one
    # process (a CPU job) trains their global batch itself.
    gpus = int(values.pop("gpus", 1))
    values.update({f.name: getattr(args, f.name) for f in dataclasses.fields(TrainParams) if hasattr(args, f.name)})
    params = TrainParams(**values)  # an unknown key is a TypeError that names it
    if args.threads:
        torch.set_num_threads(args.threads)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    processes = gpus if world == 1 else world
    if world > 1:
        controller.bind_to_launcher()  # a rank dies with torchrun, which dies with the launcher
        cuda = params.device != "cpu" and torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank = dist.get_rank() if world > 1 else 0

    if rank == 0:
        logger = configure_logging(args.log, "shardflow.train", params)
    else:
        logging.basicConfig(level=logging.WARNING)
        logger = logging.getLogger("shardflow.train")
    tokenizer = None
    if args.tokenizer:
        from shardflow.train.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    try:
        return train(args.data, args.out, params, logger, resume_dir=args.resume_dir, tokenizer=tokenizer,
                     keep_resume=args.keep_resume, sample_tokens=args.sample_tokens, out_of_memory=args.out_of_memory,
                     processes=processes)
    finally:
        if world > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    with failures.reporting_rank_error():  # a rank the train launcher started says how it ended
        main()
