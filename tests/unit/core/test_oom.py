"""Out-of-memory back-off between training attempts (shardflow.core.oom.smaller_micro_batch)."""

from shardflow.core.oom import smaller_micro_batch


def test_the_next_micro_batch_halves_and_divides_the_configured_one():
    def chain(batch_size):
        out, micro = [batch_size], batch_size
        while (micro := smaller_micro_batch(batch_size, micro)) is not None:
            out.append(micro)
        return out

    assert chain(32) == [32, 16, 8, 4, 2, 1]
    assert chain(12) == [12, 6, 3, 1]  # 3 does not halve evenly: 1, so each step keeps the same windows
    assert chain(7) == [7, 1]
    assert chain(1) == [1]
    # Learned on another config: half of what did not fit, a divisor of the batch_size now configured.
    assert smaller_micro_batch(24, 32) == 12
    assert smaller_micro_batch(16, 64) == 16
