"""The reader of the frozen development/test split (benchmarks/results/split.json)."""

import hashlib
import json
import math

import pytest

from dlperf.errors import ConfigError
from dlperf.validation import split
from dlperf.validation.backtest import Row


def test_the_committed_split_puts_each_listed_model_on_its_side():
    sp = split.load()
    assert sp.side_of_model("resnet56") == split.TEST
    assert sp.side_of_model("bert_base") == split.TEST
    assert sp.side_of_model("resnet50") == split.DEVELOPMENT
    assert sp.side_of_model("gpt2_small") == split.DEVELOPMENT
    assert sp.test_models.isdisjoint(sp.development_models)


def test_a_model_outside_the_lists_follows_the_hash_rule():
    sp = split.load()
    names = [f"hf:model{i}" for i in range(200)]

    def rule(n: str) -> bool:
        h = hashlib.sha256(("dlperf-split-v1:" + n).encode()).hexdigest()
        return int(h[:8], 16) / 2**32 < 0.3

    sides = [sp.side_of_model(n) for n in names]
    assert sides == [split.TEST if rule(n) else split.DEVELOPMENT for n in names]
    assert 0.15 < sides.count(split.TEST) / len(names) < 0.45  # the rule's 30%, roughly
    assert sp.side_of_run("abc") == (split.TEST if rule("abc") else split.DEVELOPMENT)


def test_a_row_is_sided_by_its_model_else_its_run():
    sp = split.load()
    r = Row("held-out batch", "x", 1.0, 1.0, model="alexnet")
    assert sp.side(r.model, r.run_id) == split.TEST
    assert sp.side(None, None) == split.DEVELOPMENT


@pytest.mark.parametrize("content", ["not json", json.dumps({"salt": 1}),
                                     json.dumps([1, 2]),
                                     json.dumps({"salt": "s", "test_models": "a",
                                                 "development_models": []})])
def test_a_bad_split_file_is_refused_naming_it(tmp_path, content):
    p = tmp_path / "split.json"
    p.write_text(content)
    with pytest.raises(ConfigError, match="split"):
        split.load(p)
    with pytest.raises(ConfigError, match="cannot read"):
        split.load(tmp_path / "missing.json")


def test_the_split_table_gives_each_side_its_own_numbers():
    from dlperf.validation import Validation

    v = Validation([Row("held-out batch", "a", 1.0, 1.1, model="alexnet", bound="host"),
                    Row("held-out batch", "b", 1.0, 1.05, model="resnet50")], [])
    line = [ln for ln in v.split_table(split.load()).splitlines()
            if ln.startswith("| held-out batch")][0]
    # development: resnet50 (5% off), test: alexnet (10% off, host-bound)
    assert line.startswith("| held-out batch | 1 / 1 | 5.00 / 10.00 | – / 10.00 |")
    assert line.endswith("| 100% / 0% (h 0%) |")  # coverage, per bound where rows have one


def test_signs_are_counted_beyond_the_noise_for_the_model_and_the_trivial_rule_alike():
    """A pair whose measured change (0.5%) is inside the device repeat noise (1%) has no sign to
    get right: both the model's and the trivial rule's counts show it apart."""
    from dlperf.validation import Validation

    cat = "what-if eager->graph"
    v = Validation([Row("repeat (noise floor)", "r", 1.0, 1.01, bound="device", model="vgg16"),
                    Row(cat, "a", 0.995, 1.02, 1.0, sign_ok=False, bound="device",
                        model="resnet50"),
                    Row(cat, "b", 0.9, 0.92, 1.0, sign_ok=True, bound="device",
                        model="resnet50")], [])
    line = [ln for ln in v.split_table(split.load()).splitlines()
            if ln.startswith(f"| {cat}")][0]
    assert "| 1/2 (beyond noise 1/1) / – |" in line
    assert "| faster 2/2 (beyond noise 1/1) / – |" in line


def test_a_cell_is_inside_85_to_95_unrounded_and_its_chance_is_binomial():
    from dlperf import validation as va

    assert va.inside(17, 20) and va.inside(19, 20)
    assert not va.inside(16, 20) and not va.inside(20, 20)
    assert not va.inside(33, 39)  # 84.6%, printed 85%
    # 6 rows: k / 6 is 83% or 100%, never inside; 8 rows: only k = 7 (87.5%)
    assert va.chance_inside(6) == 0.0
    assert va.chance_inside(8) == pytest.approx(8 * 0.9 ** 7 * 0.1)
    # 20 rows: k = 17, 18, 19
    want = sum(math.comb(20, k) * 0.9 ** k * 0.1 ** (20 - k) for k in (17, 18, 19))
    assert va.chance_inside(20) == pytest.approx(want)
    assert va.chance_inside(2000) > 0.99
    assert va.chance_inside(20, 0.5) < 0.01  # a 50% rule's cells are almost never inside
    with pytest.raises(ValueError, match="at least one row"):
        va.chance_inside(0)
    with pytest.raises(ValueError, match="level"):
        va.chance_inside(10, 1.0)


def test_coverage_cells_are_per_bound_and_the_split_table_counts_them():
    from dlperf import validation as va
    from dlperf.validation import intervalcheck as cv

    rows = [Row("held-out batch", f"h{i}", 1.0 + 0.01 * i, 1.0, model=f"m{i % 3}",
                bound="host" if i < 10 else "device") for i in range(30)]
    rows += [Row("2-GPU from 1-GPU", f"d{i}", 1.0, 1.0 + 0.02 * i, model=f"m{i}")
             for i in range(4)]
    covs = cv.coverage(rows, 0.9, categories=["held-out batch", "2-GPU from 1-GPU"])
    cells = va.coverage_cells(covs)
    assert [(c, b, n) for c, b, _, n in cells] == [
        ("held-out batch", "host", 10), ("held-out batch", "device", 20),
        ("2-GPU from 1-GPU", None, 4)]
    by = {d["category"]: d for d in covs}
    assert cells[0][2] == round(by["held-out batch"]["coverage_host"] * 10)
    v = va.Validation(rows, [])
    said = [ln for ln in v.split_table(split.load()).splitlines() if ln.startswith("Cells")]
    assert len(said) == 1 and "inside 85-95%: development" in said[0]



def test_coverage_cells_are_the_tallies_summed_and_each_bounds_covered_share():
    """A cell's counts are its models' tallies summed, and equal the coverage share times the
    count of that bound (rows of no bound in a category with bounds are in no cell)."""
    import random

    from dlperf.validation import intervalcheck as cv

    rng = random.Random(7)
    bounds = ("host", "device", None)
    rows = [Row("held-out batch", f"h{i}", 1.0 + rng.gauss(0, 0.05), 1.0,
                model=f"m{rng.randrange(5)}", bound=rng.choice(bounds)) for i in range(60)]
    rows += [Row("2-GPU from 1-GPU", f"d{i}", 1.0 + rng.gauss(0, 0.05), 1.0,
                 model=f"m{rng.randrange(3)}") for i in range(9)]
    covs = cv.coverage(rows, 0.9, categories=["held-out batch", "2-GPU from 1-GPU"],
                       holdout="model")
    cells = cv.coverage_cells(covs)
    assert cells == [(c, b, sum(k for k, _ in per), sum(n for _, n in per))
                     for c, b, per in cv.cell_tallies(covs)]
    by = {d["category"]: d for d in covs}
    for c, b, k, n in cells:
        d = by[c]
        share, count = (d["coverage_" + b], d["count_" + b]) if b else (d["coverage"],
                                                                        d["count"])
        assert (k, n) == (round(share * count), count) and isinstance(k, int)
    assert [(c, b) for c, b, *_ in cells] == [("held-out batch", "host"),
                                              ("held-out batch", "device"),
                                              ("2-GPU from 1-GPU", None)]
    assert sum(n for c, _, _, n in cells if c == "held-out batch") < by["held-out batch"]["count"]

def _cov(host: dict, device: dict) -> dict:
    every = {m: [host.get(m, [0, 0])[0] + device.get(m, [0, 0])[0],
                 host.get(m, [0, 0])[1] + device.get(m, [0, 0])[1]] for m in {*host, *device}}
    return {"category": "held-out batch", "count_host": sum(n for _, n in host.values()),
            "count_device": sum(n for _, n in device.values()), "models_host": host,
            "models_device": device, "models": every}


def test_the_consistency_table_judges_18_of_20_consistent_and_10_of_20_below():
    from dlperf.validation import intervalcheck as cv

    covs = [_cov({"a": [9, 10], "b": [9, 10]}, {"a": [5, 10], "b": [5, 10]})]
    t = cv.consistency_markdown({"development": covs, "test": covs})
    host = [ln for ln in t.splitlines() if ln.startswith("| held-out batch, host | test |")]
    dev = [ln for ln in t.splitlines() if ln.startswith("| held-out batch, device | test |")]
    assert len(host) == len(dev) == 1
    assert "| 18/20 | 90.0% (68.3%-98.8%) | 1.000 | yes |" in host[0] and host[0].endswith("| in |")
    assert "| 10/20 | 50.0% (27.2%-72.8%) |" in dev[0] and "| below |" in dev[0]
    assert dev[0].endswith("| out |")
    said = [ln for ln in t.splitlines() if ln.startswith("Cells")]
    assert "exact binomial" in said[0] and "development 1 of 2, test 1 of 2" in said[0]
    assert "held-out batch, device 10/20 (p 1.4e-05)" in said[0]
    # two models, each 5 of 10: no excess variance, but two clusters carry ~1/40 of the rows
    assert "clustered by model" in said[1] and "development 2 of 2" in said[1]


def test_the_clustered_judgement_names_a_cell_whose_models_all_miss():
    from dlperf.validation import intervalcheck as cv

    many = {f"m{i}": [6, 10] for i in range(12)}  # 60% in every one of 12 models
    t = cv.consistency_markdown({"test": [_cov(many, {"a": [10, 10]})]})
    said = [ln for ln in t.splitlines() if ln.startswith("Cells")]
    assert "held-out batch, host 72/120" in said[0] and "held-out batch, host 72/120" in said[1]
    assert "| 12: " in t


def test_the_consistency_table_counts_the_split_tables_cells():
    from dlperf import validation as va

    rows = [Row("held-out batch", f"h{i}", 1.0 + 0.01 * i, 1.0,
                model=("alexnet", "resnet50", "vgg16")[i % 3],
                bound="host" if i < 10 else "device") for i in range(30)]
    v = va.Validation(rows, [])
    spl = split.load()
    cells = {s: va.coverage_cells(c) for s, c in v.side_coverage(spl).items()}
    t = v.consistency_table(spl)
    for side, cs_ in cells.items():
        for cat, b, k, n in cs_:
            assert sum(ln.startswith(f"| {cat}, {b} | {side} | {k}/{n} |")
                       for ln in t.splitlines()) == 1
