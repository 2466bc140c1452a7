"""A fresh user's trial of ``dlperf predict`` (session 15): a what-if in a direction the
back-test never takes says its interval is borrowed, as every other path no back-test judges
does."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.perfmodel import api, whatifs
from dlperf.perfmodel import intervalchoice as ic

ROOT = Path(__file__).resolve().parents[2] / "benchmarks/results"
H = ["--db", str(ROOT / "h200"), "--db", str(ROOT / "h200x2")]
VGG = ["--model", "vgg16", "--framework", "torch", "--mode", "eager", "-b", "64"]


def _cli(*args):
    r = CliRunner().invoke(app, ["predict", *map(str, args)])
    assert "Traceback" not in r.output
    return r.exit_code, " ".join(r.output.split())


def test_every_back_tested_pair_keeps_its_own_interval():
    """Each pair of stored configurations the what-if back-test makes
    (:data:`whatifs.WHATIFS`), predicted as a what-if from its base to its target, is judged
    by its own category, and every change it makes is one that category's rows make
    (:data:`whatifs.JUDGED_STEPS`): nothing of it is borrowed. The reverse of a precision or
    mode pair is not back-tested: it borrows."""
    from types import SimpleNamespace

    from dlperf.perfmodel.calibrate import Config

    start = Config("vgg16", "torch", "eager", "fp32")
    for cat, ch in whatifs.WHATIFS:
        b = start.with_(**{k: v[0] for k, v in ch.items()})
        t = start.with_(**{k: v[1] for k, v in ch.items()})
        req = SimpleNamespace(base=b, target=t, changes=whatifs.whatif_changes(b, t))
        assert whatifs.whatif_category(b, t) == cat, (cat, ch)
        assert ic._unjudged_steps(SimpleNamespace(path=cat), req) == [], (cat, ch)
        if "framework" not in ch and cat != whatifs.TWO_CHANGES:  # one step: the reverse
            back = SimpleNamespace(base=t, target=b, changes=whatifs.whatif_changes(t, b))
            assert ic._unjudged_steps(SimpleNamespace(path=cat), back) == [
                (k, v[1], v[0]) for k, v in ch.items()], (cat, ch)


@pytest.mark.parametrize("what_if, own", [
    (["precision=bf16"], None),  # stored target: its own series, no what-if path
    (["precision=tf32"], "precision fp32 -> tf32"),
    (["precision=tf32", "mode=graph"], "precision fp32 -> tf32"),
])
def test_a_what_if_no_back_test_takes_borrows_its_interval(what_if, own):
    """vgg16 torch eager fp32 -> tf32 (not stored) took the fp32->bf16 rows' 90% interval as
    its own; the back-test pairs fp32 -> bf16 only, so it is borrowed at 95% and said so."""
    args = [a for w in what_if for a in ("--what-if", w)]
    code, out = _cli(*H, *VGG, "--precision", "fp32", *args)
    assert code == 0, out
    assert "(90% interval)" in out
    if own is None:
        assert "borrowed" not in out
    else:
        assert "interval from: borrowed from what-if" in out and "at 95%" in out
        assert f"a change of {own} is not back-tested on stored pairs" in out


@pytest.mark.parametrize("base, target, path, unjudged", [
    (("eager", "fp32"), ("eager", "bf16"), "what-if fp32->bf16", []),
    (("eager", "bf16"), ("eager", "fp32"), "what-if fp32->bf16",
     [("precision", "bf16", "fp32")]),
    (("eager", "bf16"), ("graph", "bf16"), "what-if eager->graph", []),
    (("graph", "bf16"), ("eager", "bf16"), "what-if eager->graph", [("mode", "graph", "eager")]),
    (("eager", "bf16"), ("graph", "fp32"), whatifs.TWO_CHANGES, []),
    (("graph", "tf32"), ("eager", "bf16"), whatifs.TWO_CHANGES,
     [("mode", "graph", "eager"), ("precision", "tf32", "bf16")]),
])
def test_unjudged_steps_of_each_direction(base, target, path, unjudged):
    """The directions the back-test judges keep their own interval (nothing unjudged); the
    reverse ones are named, each ``(field, from, to)``."""
    from types import SimpleNamespace

    from dlperf.perfmodel.calibrate import Config

    b = Config("vgg16", "torch", base[0], base[1])
    t = Config("vgg16", "torch", target[0], target[1])
    req = SimpleNamespace(base=b, target=t, changes=whatifs.whatif_changes(b, t))
    assert ic._unjudged_steps(SimpleNamespace(path=path), req) == unjudged
    assert whatifs.whatif_category(b, t) == path


def test_an_unjudged_direction_is_found_once_and_said(monkeypatch):
    """A what-if in a direction its path's rows never take (vgg16 torch eager bf16 -> fp32) is
    found not back-tested by one look for its unjudged steps, whose words name them."""
    from types import SimpleNamespace

    from dlperf.perfmodel.calibrate import Config

    calls = []
    unjudged = ic._unjudged_steps
    monkeypatch.setattr(ic, "_unjudged_steps",
                        lambda d, req: calls.append(1) or unjudged(d, req))
    b = Config("vgg16", "torch", "eager", "bf16")
    t = b.with_(precision="fp32")
    d = SimpleNamespace(path=whatifs.whatif_category(b, t),
                        one=SimpleNamespace(how="what-if", fit=None))
    req = SimpleNamespace(world=1, batch=64, changes=whatifs.whatif_changes(b, t), host_ns=None,
                          from_base=True, base=b, target=t)
    assert ic._not_backtested(d, req, {2}) == (
        "the 'what-if fp32->bf16' back-test: a change of precision bf16 -> fp32 is not "
        "back-tested on stored pairs, so its own error is not known here")
    assert calls == [1]
    assert ic._not_backtested(d, SimpleNamespace(**{**vars(req), "base": t, "target": b}),
                               {2}) is None  # fp32 -> bf16: its path's own direction
    assert len(calls) == 2


def test_a_batch_beyond_the_validated_ratio_is_looked_up_once(monkeypatch):
    """A series prediction further from its fitted batches than its category's back-test went
    is found not back-tested by one :func:`beyond_validated` per prediction, whose numbers the
    words give; a draft of another path is not held to that category's ratio."""
    from types import SimpleNamespace

    from dlperf.perfmodel.calibrate import Config

    calls = []
    beyond = ic.beyond_validated
    monkeypatch.setattr(ic, "beyond_validated",
                        lambda one, batch: calls.append(batch) or beyond(one, batch))
    one = SimpleNamespace(how="series", fit=SimpleNamespace(batch_sizes=(8, 16, 32)))
    cat, ratio, limit, near = beyond(one, 1024)
    assert (cat, ratio, near) == ("extrapolate 2x", 32.0, 32) and ratio > limit
    c = Config("vgg16", "torch", "eager", "bf16")
    req = SimpleNamespace(world=1, batch=1024, changes=(), host_ns=None, from_base=False,
                          base=c, target=c)
    assert ic._not_backtested(SimpleNamespace(path=cat, one=one), req, {2}) == (
        f"the '{cat}' back-test, which went up to {limit:g}x the nearest fitted batch: "
        "32x is not validated")
    assert calls == [1024]
    assert ic._not_backtested(SimpleNamespace(path="held-out batch", one=one), req, {2}) is None
    assert calls == [1024, 1024]
    assert ic._not_backtested(SimpleNamespace(path=cat, one=one),
                              SimpleNamespace(**{**vars(req), "batch": 64}), {2}) is None
    assert calls == [1024, 1024, 64]


def test_committed_tables_are_regenerated_with_an_empty_cache(monkeypatch, tmp_path):
    """``perfmodel_validate.py --committed`` back-tests with a new empty ``$DLPERF_CACHE_DIR``:
    the table stores every group fit the process holds, so with the user's cache a fit one of
    their predictions made (vgg16 torch eager tf32, from a what-if) was written into the
    committed table."""
    import importlib.util
    import os
    import sys

    spec = importlib.util.spec_from_file_location(
        "perfmodel_validate_t15", ROOT.parent / "perfmodel_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    user = tmp_path / "user-cache"
    user.mkdir()
    (user / "perfmodel-fits-x.json").write_text("{}")
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(user))
    monkeypatch.chdir(tmp_path)  # main() moves to the repository's root; chdir is undone
    seen = []
    monkeypatch.setattr(mod, "_run", lambda *a, **k: seen.append(
        (os.environ["DLPERF_CACHE_DIR"], sorted(os.listdir(os.environ["DLPERF_CACHE_DIR"])))))
    monkeypatch.setattr(sys, "argv", ["perfmodel_validate.py", "--committed"])
    mod.main()
    assert len(seen) == len(mod.COMMITTED)
    assert {d for d, _ in seen} != {str(user)} and len({d for d, _ in seen}) == 1
    from dlperf.tempdirs import OWNER_FILE

    assert seen[0][1] == [OWNER_FILE]  # owned: reclaimed by a later run once this is gone
    import shutil

    shutil.rmtree(seen[0][0])  # the script removes it at exit; this process goes on


def test_a_configuration_stored_only_traced_is_not_called_unstored():
    """hf:gpt2 torch eager bf16 is stored in yourmodel.db only as a traced run (its op
    classes), which no series is fitted to: the analytic prediction's hint said "is not
    stored" of a point the user can see in `dlperf results`."""
    code, out = _cli("--db", ROOT / "h200", "--db", ROOT / "h200/yourmodel/yourmodel.db",
                     "--model", "hf:gpt2", "--framework", "torch", "--mode", "eager",
                     "--precision", "bf16", "-b", "16")
    assert code == 0, out
    assert "how: analytic" in out
    assert ("hf:gpt2 torch/eager cuda bf16 is stored only in 1 instrumented run(s) (traced or "
            "--breakdown), which no series is fitted to") in out
    assert "is not stored" not in out and "but hf:gpt2 torch/graph cuda bf16 is" in out
    # the suggested what-if changes only what differs (precision=bf16 would change nothing)
    assert "(e.g. --precision bf16 --mode graph --what-if mode=eager)" in out


def test_validate_stores_only_the_fits_it_asked_for(tmp_path, monkeypatch):
    """The residual table ``--validate`` writes holds the group fits the back-test (and the
    priming of each stored configuration) asked for, not every fit the process held: a fit
    read from the user's cache (made by one of their predictions before) was written into the
    committed table, so the table depended on what the user had predicted."""
    import sys

    from dlperf import validation
    from dlperf.perfmodel import fitcache as fc
    from dlperf.results.store import ResultStore

    sys.path.insert(0, str(Path(__file__).parent))
    from test_perfmodel_predict_requests import _result

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path / "cache"))
    db = str(tmp_path / "sw.db")
    with ResultStore(db) as store:
        for b, t in {8: 0.60e-3, 16: 0.83e-3, 32: 1.37e-3}.items():
            store.add(_result("fcn5_tiny", b, t, precision="fp32", device="cpu", threads=1))
    recs = validation.validated_records(db)
    stray = (("torch", "eager", "tf32", "cuda"), "vgg16", "NVIDIA H200", False)
    fc.write_fits(fc.fits_file(recs), {stray: None})  # the user's cache holds another fit
    v = validation.validate(db)
    assert v.rows
    assert stray in api.shared_fits(recs).groups  # read from the cache: held, not asked for
    validation.store_table(db, v)
    assert stray not in fc.read_table_fits([db])
    assert fc.read_table_fits([db]).keys() == api.shared_fits(recs).memo.asked("group").keys()


@pytest.mark.parametrize("given, missing", [
    (["--model", "resnet50"], "--batch-size missing"),
    (["-b", "64"], "--model missing"),
    ([], "--model and --batch-size missing"),
])
def test_a_missing_model_or_batch_is_named(given, missing):
    code, out = _cli(*H, *given)
    assert code == 2, out
    assert f"error: {missing}: give --model and --batch-size" in out


@pytest.mark.parametrize("batch, said", [
    ("1e29", "is over dlperf's limit of 16,777,216 samples"),
    ("1e30", "--batch-size 1e30 is over dlperf's limit of 16,777,216 samples"),
    ("1e999999", "--batch-size 1e999999 is over dlperf's limit of 16,777,216 samples"),
    ("-1e30", "--batch-size: -1e30 must be >= 1"),
    ("1.5", "'1.5' is not a whole number"),
])
def test_a_huge_batch_is_over_the_limit_not_fractional(batch, said):
    """``-b 1e30`` (a whole number, 10**30) was refused as "not a whole number": the reader's
    guard against expanding a huge exponent gave the wrong reason."""
    code, out = _cli(*H, "--model", "resnet50", "--framework", "torch", "--mode", "eager",
                     "--precision", "bf16", "-b", batch)
    assert code == 2, out
    assert said in out


def test_the_reports_back_test_command_names_the_files_as_given():
    """The report's "full back-test" command named the file alone (`--db dlbench.db`,
    `--db h200` for a folder), which runs only in that folder; it names it as `dlperf
    report --db` was given it, quoted for a shell where needed."""
    from dlperf.report import predicted as pr

    assert pr.validate_command("benchmarks/results/h200") == \
        "dlperf predict --validate --db benchmarks/results/h200"
    assert pr.validate_command(Path("my results/r.db")) == \
        "dlperf predict --validate --db 'my results/r.db'"


def test_results_of_an_empty_file_says_so(tmp_path):
    """`dlperf results` of a results file with no result printed an empty table (the report
    says "holds no results yet"); a filter that matches nothing in a non-empty file still
    gets its own message or table, not this one."""
    from dlperf.results.store import ResultStore

    db = str(tmp_path / "e.db")
    ResultStore(db).close()
    r = CliRunner().invoke(app, ["results", "--db", db])
    assert r.exit_code == 0, r.output
    assert "holds no results yet" in r.output and "┏" not in r.output
    assert "dlperf run ... --db" in r.output


def test_gate_advice_can_be_followed_and_says_it_once():
    """A point left out for a busy host and two modes was told "measure on a quiet host ...,
    or give fewer --threads; find what alternates ... or measure on a quiet host": fewer
    threads than the --threads 1 it ran with, and the same advice twice."""
    from dlperf.report.regress import judge_advice

    words = judge_advice(["busy host", "two modes"])
    assert words.count("quiet host") == 1 and "--threads" not in words
    assert "find what alternates" in words


def test_the_residual_tables_are_named_alike_in_one_prediction(monkeypatch):
    """A borrowed interval named the table it borrowed from relative to the working folder and,
    a few words on, the files' own table by its absolute path; both are named alike now."""
    import os

    monkeypatch.chdir(ROOT.parents[1])
    code, out = _cli("--db", "benchmarks/results/h200/dlbench.db", "--model", "lstm",
                     "--framework", "torch", "--mode", "eager", "--precision", "bf16",
                     "-b", "64")
    assert code == 0, out
    assert ("(the residual table benchmarks/results/h200/perfmodel_residuals.json has no entry "
            "for these results files)") in out
    assert os.path.abspath("benchmarks") not in out


def test_a_what_if_from_a_base_stored_only_traced_says_so():
    """The what-if from hf:gpt2 torch eager bf16, stored only as a traced run: the error said
    "no stored one-device point of" it (calibrate.fit), as the analytic hint used to."""
    code, out = _cli("--db", ROOT / "h200", "--db", ROOT / "h200/yourmodel/yourmodel.db",
                     "--model", "hf:gpt2", "--framework", "torch", "--mode", "eager",
                     "--precision", "bf16", "-b", "16", "--what-if", "precision=fp32")
    assert code == 2, out
    assert ("hf:gpt2 torch/eager cuda bf16 is stored only in 1 instrumented run(s) (traced or "
            "--breakdown), which no series is fitted to") in out
    assert "no stored one-device point" not in out
