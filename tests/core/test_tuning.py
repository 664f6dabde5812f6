"""Core's sizes and thresholds (``core/tuning.py``): changed for a block, seen by core's worker
threads, restored after the block also when it raises, refused when not a count."""

from __future__ import annotations

import pytest

from dagster_lance_partitioned.core.concurrency import parallel_map
from dagster_lance_partitioned.core.tuning import Tuning, tuned, tuning


def test_a_change_holds_in_the_block_and_in_worker_threads_and_is_restored():
    default = tuning()
    with pytest.raises(RuntimeError), tuned(max_redo=0, text_chunk=3):
        assert tuning().max_redo == 0
        seen = parallel_map(lambda _: tuning().text_chunk, range(8), 4)
        assert seen == [3] * 8
        raise RuntimeError("the block fails")
    assert tuning() == default == Tuning()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_a_value_that_is_not_a_count_is_refused(bad):
    with pytest.raises(ValueError, match="max_redo"), tuned(max_redo=bad):
        pass
    assert tuning() == Tuning()


def test_an_unknown_name_is_refused():
    with pytest.raises(TypeError, match="max_redos"), tuned(max_redos=1):
        pass
