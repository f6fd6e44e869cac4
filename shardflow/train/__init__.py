"""Language-model training from token shards: a compact GPT, its trainer, and export.

Modules: `model` (GPT-2-layout decoder), `trainer` (TrainParams, sampling from memory-
mapped shards, the resumable loop, outputs), `hf_export` (Hugging Face GPT-2 folder),
`__main__` (`python -m shardflow.train`, also under torchrun for data parallel).
"""
