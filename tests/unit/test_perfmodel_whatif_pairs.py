"""The pairs a what-if ratio is the median of (model.nearest_pairs): ties at the same FLOPs
distance are all taken, never broken by the ratio or the load order."""
import itertools
from statistics import median

from dlperf.perfmodel.model import nearest_pairs


def _pairs():
    # (other family, distance, ratio, model, file, batch): resnet50 b=128 in three files is
    # one distance; the third pick ties with two more
    return [(0, 0.1, 0.90, "googlenet", "f.db", 128),
            (0, 0.2, 0.50, "resnet50", "a.db", 128),
            (0, 0.2, 0.95, "resnet50", "c.db", 128),
            (0, 0.2, 0.70, "resnet50", "b.db", 128),
            (0, 0.3, 0.10, "alexnet", "a.db", 128),
            (1, 0.0, 2.00, "gpt2_small", "a.db", 8)]


def test_ties_at_the_cut_are_all_taken_whatever_their_ratio():
    got = nearest_pairs(_pairs(), 2)
    # googlenet, then the three resnet50 pairs at one distance (not only the smallest ratio)
    assert [(p[3], p[4]) for p in got] == [("googlenet", "f.db"), ("resnet50", "a.db"),
                                          ("resnet50", "b.db"), ("resnet50", "c.db")]
    assert median(p[2] for p in got) == (0.70 + 0.90) / 2


def test_order_of_the_input_does_not_change_the_pick():
    want = nearest_pairs(_pairs(), 2)
    for perm in itertools.permutations(_pairs()):
        assert nearest_pairs(list(perm), 2) == want


def test_no_tie_takes_exactly_nearest_and_family_first():
    got = nearest_pairs(_pairs(), 1)
    assert [p[3] for p in got] == ["googlenet"]
    assert nearest_pairs(_pairs(), 5)[-1][3] == "alexnet"   # the other family comes last
    assert nearest_pairs([], 3) == []
