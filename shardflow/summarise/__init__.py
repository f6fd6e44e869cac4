"""Summarisation: baselines, extractive MMR, and ROUGE scoring as CNN/DailyMail papers do it.

sentences   the documented sentence splitters (prose and tokenised)
lead        Lead-k
extractive  MMR over sentence embeddings from a loaded encoder
rouge       rouge-score F1 x 100, per-document tables, means, bootstrap CIs
data        JSONL(.gz) readers for documents and stored summaries, with rejects
params      SummariseParams, ScoreParams
pipeline    summarise_texts: dispatch by method
generate    abstractive generation (parameters in generate_params)
"""
