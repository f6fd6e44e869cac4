"""Batch planning at its edges: exact budgets, no texts, empty texts, bad settings.
(The engines' tests cover batching on real token lengths.)"""

from __future__ import annotations

import numpy as np
import pytest

from shardflow.core.batching import (
    bucket_width,
    collate,
    collate_to,
    default_length_buckets,
    graph_length_buckets,
    pack,
    plan_batches,
    plan_bucketed_batches,
    plan_packed_batches,
    split_batch,
)

PLANNERS = [
    lambda lengths, budget, rows: plan_batches(lengths, budget, rows),
    lambda lengths, budget, rows: [s[:2] for s in plan_bucketed_batches(lengths, (16, 32, 64), budget, rows)],
    lambda lengths, budget, rows: plan_packed_batches(lengths, budget, rows),
]


def test_a_batch_exactly_at_the_budget_is_whole_and_one_token_less_splits_it():
    assert plan_batches(np.array([50, 50, 50]), 100, 64) == [(0, 2), (2, 3)]
    assert plan_batches(np.array([50, 50]), 99, 64) == [(0, 1), (1, 2)]
    assert plan_packed_batches(np.array([40, 40, 20]), 80, 64) == [(0, 2), (2, 3)]
    assert plan_packed_batches(np.array([40, 40]), 79, 64) == [(0, 1), (1, 2)]
    assert plan_bucketed_batches(np.array([32, 20]), (16, 32), 64, 64) == [(0, 2, 32, 2)]
    assert plan_bucketed_batches(np.array([33, 20]), (16, 32), 64, 64) == [(0, 1, 33, 1), (1, 2, 32, 2)]


@pytest.mark.parametrize("plan", PLANNERS)
def test_no_texts_make_no_batches(plan):
    assert plan(np.zeros(0, dtype=np.int64), 100, 8) == []


@pytest.mark.parametrize("plan", PLANNERS)
def test_texts_of_no_tokens_are_all_planned_within_the_budget(plan):
    spans = plan(np.zeros(5, dtype=np.int64), 2, 8)
    assert [r for s, e in spans for r in range(s, e)] == list(range(5)) and all(e - s <= 2 for s, e in spans)


@pytest.mark.parametrize("plan", PLANNERS)
@pytest.mark.parametrize("budget, rows", [(0, 8), (100, 0), (-1, 8)])
def test_a_budget_or_batch_size_below_one_is_refused(plan, budget, rows):
    with pytest.raises(ValueError, match="must be >= 1"):
        plan(np.array([3, 2]), budget, rows)


def test_a_batch_that_does_not_fit_its_bucket_is_refused_naming_both_shapes():
    ids = [[1, 2, 3], [4]]
    with pytest.raises(ValueError, match=r"batch \[2, 3\] does not fit the bucket \[4, 2\]"):
        collate_to(ids, np.array([0, 1]), 0, False, width=2, n_rows=4)
    with pytest.raises(ValueError, match=r"batch \[2, 3\] does not fit the bucket \[1, 16\]"):
        collate_to(ids, np.array([0, 1]), 0, False, width=16, n_rows=1)


def test_an_empty_text_cannot_be_packed_but_can_be_padded():
    with pytest.raises(ValueError, match="cannot pack an empty token sequence"):
        pack([[1, 2], []], np.array([0, 1]))
    batch = collate([[1, 2], []], np.array([0, 1]), pad_id=0, left_pad=False)
    assert batch.input_ids.tolist() == [[1, 2], [0, 0]] and batch.attention_mask[1].sum() == 0


def test_the_buckets_end_at_the_model_length_and_a_length_at_a_bucket_stays_in_it():
    assert default_length_buckets(16) == (16,) and default_length_buckets(17) == (16, 17)
    assert default_length_buckets(1) == (1,) and graph_length_buckets(1) == (1,)
    assert bucket_width(32, (16, 32)) == 32 and bucket_width(0, (16, 32)) == 16
    for buckets in (default_length_buckets, graph_length_buckets):
        with pytest.raises(ValueError, match="max_length must be >= 1"):
            buckets(0)


def test_a_split_into_pieces_of_no_rows_keeps_every_row_in_pieces_of_one():
    """max_rows below 1 counts as 1, as the loop's step already took it: a packed batch
    was cut into empty pieces, every row silently lost, and a padded one stopped on
    numpy's 'zero-size array' error."""
    ids = [[1, 2], [3]]
    for batch in (collate(ids, np.array([0, 1]), 0, False), pack(ids, np.array([0, 1]))):
        pieces = split_batch(batch, 0, left_pad=False)
        assert [p.rows.tolist() for p in pieces] == [[0], [1]]
        assert [p.input_ids.tolist() for p in pieces] == [[[1, 2]], [[3]]]
