"""Run and sweep configuration: validation messages, expansion, run keys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dlperf.config import RunConfig, load_sweep, make_run_config
from dlperf.errors import ConfigError


def test_unknown_model_names_close_match_and_choices():
    with pytest.raises(ConfigError) as e:
        make_run_config(model="resnt50", batch_size=8)
    assert "resnt50" in str(e.value) and "did you mean 'resnet50'" in str(e.value)
    assert "lstm" in str(e.value)  # valid choices listed


@pytest.mark.parametrize("field,value,needle", [
    ("precision", "fp16", "fp32"), ("device", "tpu", "cuda"), ("batch_size", 0, "below the minimum: give at least 1"),
    ("framework", "caffe", "torch"), ("mode", "jit", "eager")])
def test_bad_values_name_field_and_valid_choices(field, value, needle):
    fields = {"model": "fcn5_tiny", "batch_size": 8, field: value}
    with pytest.raises(ConfigError) as e:
        make_run_config(**fields)
    assert field in str(e.value) and needle in str(e.value)


def test_grad_accum_must_divide_batch():
    with pytest.raises(ConfigError, match="not divisible"):
        make_run_config(model="fcn5_tiny", batch_size=10, grad_accum=4)


def test_run_key_stable_and_ignores_where_not_what():
    a = make_run_config(model="fcn5_tiny", batch_size=8)
    b = make_run_config(model="fcn5_tiny", batch_size=8, data_dir="/x", timeout_s=5)
    c = make_run_config(model="fcn5_tiny", batch_size=16)
    assert a.run_key() == b.run_key() != c.run_key()
    assert RunConfig.model_validate_json(a.model_dump_json()).run_key() == a.run_key()


def test_sweep_expands_grid_and_suite(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("""
name: t
defaults: {device: cpu, iterations: {min_iters: 3}}
grid:
  - model: [fcn5_tiny, lstm_tiny]
    batch_size: [8, 16]
    precision: [fp32, bf16]
  - suite: quick
    batch_size: 4
  - model: fcn5_tiny        # duplicate of a point above: dropped
    batch_size: 8
""")
    from dlperf.zoo import SUITES

    pts = load_sweep(p).expand()
    assert len(pts) == 2 * 2 * 2 + len(SUITES["quick"])
    assert all(x.measure.iterations.min_iters == 3 for x in pts)
    assert len({x.run_key() for x in pts}) == len(pts)


@pytest.mark.parametrize("text,needle", [
    ("name: t\ngrid:\n  - model: [resnet5]\n    batch_size: 8\n", "grid[0].model"),
    ("name: t\ngrid:\n  - batch_size: 8\n", "needs 'model'"),
    ("name: t\ngrid:\n  - suite: quik\n    batch_size: 8\n", "did you mean 'quick'"),
    # a model beside a suite was dropped without a word
    ("name: t\ngrid:\n  - {model: resnet50, suite: quick, batch_size: 8}\n",
     "grid[0]: give 'model' or 'suite', not both"),
    # a model in defaults beside a grid suite was dropped without a word too
    ("name: t\ndefaults: {model: resnet50}\ngrid:\n  - {suite: quick, batch_size: 8}\n",
     "grid[0] runs suite 'quick', whose models would replace defaults.model ('resnet50')"),
    ("name: t\ngrid: [\n", "not valid YAML"),
    ("name: t\ngrid:\n  - model: fcn5_tiny\n    batch_size: 8\n    colour: red\n", "colour"),
    ("- a\n- b\n", "mapping"),
    ("name: t\ndefaults: {batchsize: 4}\ngrid:\n  - model: fcn5_tiny\n",
     "defaults: unknown key 'batchsize'; did you mean 'batch_size'?"),
    ("name: t\ngrid:\n  - {model: fcn5_tiny, batchsize: 4}\n",
     "grid[0]: unknown key 'batchsize'; did you mean 'batch_size'?"),
    # unknown fields at any level of the models (pydantic's extra_forbidden)
    ("name: x\ngird:\n  - {model: fcn5_tiny}\n", "unknown field 'gird'; did you mean 'grid'?"),
    ("name: x\ndefaults: {iterations: {min_iter: 5}}\ngrid:\n  - {model: fcn5_tiny, batch_size: 4}\n",
     "iterations.min_iter: unknown field 'min_iter'; did you mean 'min_iters'?"),
    # a bad value under defaults is reported there, not at the first grid entry it reaches
    ("name: x\ndefaults: {iterations: {ci_target_rel: 2}}\ngrid:\n  - {model: fcn5_tiny, "
     "batch_size: 4}\n", "defaults.iterations.ci_target_rel: 2 is over the limit: give less than 1"),
    # pydantic's own phrasing never reaches a user: the key, the limit and its unit
    ("name: x\ngrid: []\n", "grid: an empty list; give at least 1 entry (e.g. `grid:"),
    ("name: ''\ngrid:\n  - {model: fcn5_tiny}\n", "name: empty text; give a name"),
    ("name: x\ngrid:\n  - {model: fcn5_tiny, batch_size: 4, iterations: {min_time_s: 1.0e12}}\n",
     "grid[0].iterations.min_time_s: '1.0e12' is over the limit: give at most 2,592,000 seconds "
     "(30 days)"),
    ("name: x\ndefaults: {iterations: {ci_target_rel: 2}}\ngrid:\n  - {model: fcn5_tiny, "
     "batch_size: 4, iterations: {ci_target_rel: 3}}\n", "grid[0].iterations.ci_target_rel"),
    ("name: x\ndefaults: {batch_size: 0}\ngrid:\n  - {model: fcn5_tiny}\n",
     "defaults.batch_size"),
])
def test_bad_sweep_files_are_explained(tmp_path, text, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert needle in str(e.value)
    assert "Input should" not in str(e.value) and "after validation" not in str(e.value)


@pytest.mark.parametrize("flag,value,needle", [
    ("--min-time", "1e12", "--min-time (min_time_s): 1e+12 is over the limit: give at most "
                           "2,592,000 seconds (30 days)"),
    ("--min-time", "-1", "--min-time (min_time_s): -1 is below the minimum: give at least 0 "
                         "seconds"),
    ("--max-time", "1e12", "--max-time (max_time_s): 1e+12 is over the limit"),
])
def test_run_flag_bounds_name_the_flag_limit_and_unit(tmp_path, flag, value, needle):
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["run", "--model", "fcn5_tiny", "--db", str(tmp_path / "r.db"),
                                 flag, value])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and needle in text, text
    assert "Input should" not in text


@pytest.mark.parametrize("args,needle", [
    (["--framework-option", "bucket_cap_mb=0"],
     "bucket_cap_mb (--bucket-cap-mb): 0 is below the minimum: give more than 0 MB"),
    (["--bucket-cap-mb", "-5"],
     "bucket_cap_mb (--bucket-cap-mb): -5 is below the minimum: give more than 0 MB"),
    (["--framework-option", "bucket_cap_mb=1e9"],
     "bucket_cap_mb (--bucket-cap-mb): '1e9' is over the limit: give at most 1,048,576 MB"),
    (["--framework-option", "bucket_cap_mb=abc"],
     "bucket_cap_mb (--bucket-cap-mb): 'abc' is not a number: give a number of MB"),
    (["--framework-option", "bucket_cap_mb=nan"],
     "bucket_cap_mb (--bucket-cap-mb): 'nan' is not a finite number: give a finite number of MB"),
    (["--framework-option", "static_graph=maybe"],
     "static_graph (--static-graph): 'maybe' is not true or false: give true or false"),
])
def test_framework_option_errors_name_the_flag_limit_and_unit(tmp_path, args, needle):
    """A framework's own options (--framework-option KEY=VALUE, and DDP's flags, which set
    them) are refused in the words of the other flags: the option and its flag, the value,
    the limit with its unit and what to give, never pydantic's phrasing."""
    from typer.testing import CliRunner

    from dlperf.cli import app

    r = CliRunner().invoke(app, ["run", "--model", "fcn5_tiny", "--device", "cpu", "--db",
                                 str(tmp_path / "r.db"), *args])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"--framework-option (options): torch options: {needle}" in text, text
    assert "Input should" not in text and not (tmp_path / "r.db").exists(), text


def test_yaml_errors_name_the_file_and_binary_files_are_refused(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: t\ngrid: [\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    # FILE:LINE:COL (dlperf.yamlsafe), never "<unicode string>"
    assert f"{p}:3:" in str(e.value) and "<unicode string>" not in str(e.value)
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_sweep(p)


def test_missing_sweep_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_sweep("/nonexistent/sweep.yaml")


def test_run_key_of_a_stored_point_survives_new_fields_at_their_default():
    """Adding a field (here ``layout``) must not change the key of points stored before it:
    the key of a default-layout point is the hash of the fields as they were before."""
    import hashlib
    import json

    cfg = RunConfig(model="fcn5_tiny", batch_size=8)
    v1_fields = ("model", "framework", "mode", "device", "precision", "batch_size",
                 "grad_accum", "data", "threads", "seed")  # what the first results were keyed by
    before = {k: v for k, v in cfg.flat().items() if k in v1_fields}
    key = hashlib.sha256(json.dumps(before, sort_keys=True, separators=(",", ":")).encode())
    assert cfg.run_key() == key.hexdigest()[:16]
    # a set layout enters the key of a CNN (for an FCN it changes nothing measured)
    assert (RunConfig(model="resnet50_tiny", batch_size=8, layout="nhwc").run_key()
            != RunConfig(model="resnet50_tiny", batch_size=8).run_key())


def test_compile_mode_choices_key_and_framework_rule():
    base = RunConfig(model="fcn5_tiny", batch_size=8, mode="graph")
    ro = RunConfig(model="fcn5_tiny", batch_size=8, mode="graph", compile_mode="reduce-overhead")
    assert base.runtime.compile_mode == "default" and ro.run_key() != base.run_key()
    with pytest.raises(ConfigError, match="valid compile_modes: default, max-autotune"):
        make_run_config(model="fcn5_tiny", batch_size=8, mode="graph", compile_mode="fast")
    for fw, mode in (("torch", "eager"), ("jax", "xla"), ("tensorflow", "graph")):
        with pytest.raises(ConfigError, match="needs --framework torch --mode graph"):
            make_run_config(model="fcn5_tiny", batch_size=8, framework=fw, mode=mode,
                            compile_mode="reduce-overhead")


def test_crossing_modes_with_compile_modes_drops_the_meaningless_pairs(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\ndefaults: {device: cpu}\ngrid:\n  - {model: fcn5_tiny, batch_size: 8, "
                 "mode: [eager, graph], compile_mode: [default, reduce-overhead]}\n")
    pts = load_sweep(f).expand()
    assert [(p.runtime.mode, p.runtime.compile_mode) for p in pts] == [
        ("eager", "default"), ("graph", "default"), ("graph", "reduce-overhead")]
    f.write_text("name: s\ndefaults: {device: cpu}\ngrid:\n  - {model: fcn5_tiny, batch_size: 8, "
                 "mode: eager, compile_mode: reduce-overhead}\n")
    with pytest.raises(ConfigError, match="needs --framework torch --mode graph"):
        load_sweep(f).expand()


def test_layout_choices_and_framework_rule():
    with pytest.raises(ValidationError, match="unknown layout 'nwhc'; did you mean 'nhwc'"):
        RunConfig(model="resnet50_tiny", batch_size=2, layout="nwhc")
    with pytest.raises(ValidationError, match="PyTorch option"):
        RunConfig(model="resnet50_tiny", batch_size=2, framework="jax", layout="nchw")
    assert RunConfig(model="resnet50_tiny", batch_size=2, framework="jax",
                     layout="nhwc").runtime.layout == "nhwc"


def test_every_committed_stored_config_gives_its_stored_run_key():
    """A run config read back from every stored result under benchmarks/results/ gives the
    run key it was stored under, from its config as stored (flat: schema 11 and older) and as
    the record reads it (on its axes, after :func:`dlperf.results.migrations.upgrade_record`):
    a resumed sweep finds every point measured before, whatever the run config's shape became.
    A point whose model needs a package not installed here (timm) is passed over."""
    import glob
    import json
    import sqlite3
    from pathlib import Path

    from dlperf.config.axes import AXES
    from dlperf.errors import UnavailableError
    from dlperf.results.schema import RunRecord

    root = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    checked, dp_options, flat = 0, 0, 0
    for db in sorted(glob.glob(str(root / "**" / "*.db"), recursive=True)):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = con.execute("SELECT run_key, result_json FROM results").fetchall()
        con.close()
        for key, js in rows:
            stored = json.loads(js or "{}") or {}
            cfg = stored.get("config")
            if not cfg:
                continue
            nested = RunRecord.from_dict(stored).identity.config
            assert set(nested) <= set(AXES), (db, sorted(nested))
            try:
                got = RunConfig(**cfg)
            except UnavailableError:
                continue
            assert got.run_key() == key == RunConfig(**nested).run_key(), (db, cfg)
            assert RunConfig(**nested) == got
            checked += 1
            flat += not set(cfg) & set(AXES)
            dp_options += got.distributed and bool(got.runtime.ddp.changed())
    # data-parallel points with DDP options among them; most committed configs are flat
    # (schema 11 and older), files measured later store them on their axes
    assert checked > 900 and dp_options >= 2 and flat > 900


def test_ddp_broadcast_buffers_enters_the_run_key_only_when_off():
    """Keys of DDP points stored before the option existed stay valid (default on)."""
    from dlperf.config import DDPOptions

    assert DDPOptions().key_dict() == {"bucket_cap_mb": 25.0, "gradient_as_bucket_view": False,
                                       "static_graph": False, "find_unused_parameters": False}
    on = make_run_config(model="fcn5_tiny", batch_size=8, nproc=2)
    off = make_run_config(model="fcn5_tiny", batch_size=8, nproc=2,
                          ddp={"broadcast_buffers": False})
    assert on.run_key() != off.run_key()
    assert on.run_key() == make_run_config(model="fcn5_tiny", batch_size=8, nproc=2,
                                           ddp={"broadcast_buffers": True}).run_key()


def test_layout_is_no_part_of_the_key_of_a_model_without_image_activations():
    """--layout changes nothing for an FCN or an LSTM: the same point (and label), so a sweep
    file that sets a layout for every model resumes the FCN/LSTM points stored without one;
    for a CNN the layout stays in the key."""
    for m in ("fcn5_tiny", "lstm_tiny"):
        auto = make_run_config(model=m, batch_size=8)
        for lay in ("nchw", "nhwc"):
            c = make_run_config(model=m, batch_size=8, layout=lay)
            assert c.run_key() == auto.run_key() and "layout" not in c.label()
    cnn = [make_run_config(model="resnet50_tiny", batch_size=8, layout=lay)
           for lay in ("auto", "nchw", "nhwc")]
    assert len({c.run_key() for c in cnn}) == 3 and "layout=nhwc" in cnn[2].label()


def test_imagefolder_without_workers_is_the_point_with_0_workers():
    """An ImageFolder is read through the pipeline either way: no --loader-workers and
    --loader-workers 0 are one point with one run key (they were two, measured twice)."""
    a = make_run_config(model="resnet50_tiny", data="imagefolder:/x", batch_size=8)
    b = make_run_config(model="resnet50_tiny", data="imagefolder:/x", batch_size=8,
                        loader_workers=0)
    assert a.input.loader_workers == 0 and a.run_key() == b.run_key()
    c = make_run_config(model="fcn_mnist", data="mnist", batch_size=8)
    assert c.input.loader_workers is None  # a data set read into memory: no pipeline unless asked


# --- the config package's seams: registry capabilities, each framework's own rules, error
# locations, one cross product -----------------------------------------------------------------


def test_errors_are_located_at_the_field_their_rule_blames(tmp_path):
    """A rule over several fields names the field it blames (a FieldRuleError), with its flag
    for `dlperf run` and its grid entry in a sweep file; nothing is parsed from message text."""
    with pytest.raises(ConfigError) as e:
        make_run_config(model="fcn5_tiny", batch_size=8, framework="jax",
                        compile_mode="reduce-overhead")
    assert str(e.value).startswith("--compile-mode (compile_mode): compile_mode 'reduce-overhead'")
    with pytest.raises(ConfigError) as e:
        make_run_config(model="fcn5_tiny", batch_size=10, grad_accum=4)
    assert str(e.value).startswith("--batch-size (batch_size): the per-device batch 10")
    f = tmp_path / "s.yaml"
    f.write_text("name: s\ngrid:\n  - {model: fcn5_tiny, batch_size: 8}\n"
                 "  - {model: fcn5_tiny, batch_size: 8, framework: jax, layout: nchw}\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(f)
    assert "grid[1].layout: layout 'nchw' is a PyTorch option" in str(e.value)
    # an unknown top-level field that is a nested one is pointed to by its path
    with pytest.raises(ConfigError, match="did you mean 'iterations.min_iters'"):
        make_run_config(model="fcn5_tiny", batch_size=8, min_iter=3)


def _refuse_seed_7(cfg):
    return [("seed", "seed 7 is refused by this framework's own rules")] if cfg.workload.seed == 7 else []


def test_a_framework_s_own_rules_come_from_its_registry_entry(monkeypatch):
    """config calls the function the registry's ``options`` names, and reads capabilities
    (here the data-parallel layouts and modes) from the entry, not from tables of its own."""
    import dataclasses

    from dlperf import registry

    info = registry.FRAMEWORKS["torch"]
    monkeypatch.setitem(registry.FRAMEWORKS, "torch", dataclasses.replace(
        info, options=f"{__name__}:_refuse_seed_7", dp_layouts=("per_node", "per_device"),
        dp_modes=("graph",)))
    assert make_run_config(model="fcn5_tiny", batch_size=8, seed=6).workload.seed == 6
    with pytest.raises(ConfigError, match=r"^seed: seed 7 is refused by this framework's own"):
        make_run_config(model="fcn5_tiny", batch_size=8, seed=7)
    cfg = make_run_config(model="fcn5_tiny", batch_size=8, nproc=2, mode="graph")
    assert cfg.parallel.dp_layout == "per_node" and cfg.processes_per_node == 1
    with pytest.raises(ConfigError, match="not available for torch/eager; use mode graph"):
        make_run_config(model="fcn5_tiny", batch_size=8, nproc=2, mode="eager")


@pytest.mark.parametrize("framework,fields,needle", [
    ("torch", {"mode": "eager", "compile_mode": "max-autotune"}, "needs --framework torch --mode graph"),
    ("jax", {"layout": "nchw"}, "the jax models are NHWC"),
    ("jax", {"data": "mnist", "model": "fcn_mnist_tiny", "loader_impl": "threads"},
     "applies to an input pipeline"),
    ("tensorflow", {"device": "cpu", "nproc": 2, "nnodes": 2}, "one CPU device per worker"),
    ("mxnet", {"device": "cpu", "layout": "nhwc"}, "its models are NCHW"),
])
def test_each_framework_checks_its_own_options(framework, fields, needle):
    """frameworks/<name>/options.py: the rules that are the framework's alone."""
    import importlib

    from dlperf.registry import FRAMEWORKS

    mod, attr = FRAMEWORKS[framework].options.split(":")
    assert mod == f"dlperf.frameworks.{framework}.options"
    check = getattr(importlib.import_module(mod), attr)
    with pytest.raises(ConfigError, match=needle):
        make_run_config(**{"model": "fcn5_tiny", "batch_size": 8, "framework": framework,
                           **fields})
    ok = make_run_config(model="fcn5_tiny", batch_size=8, framework=framework,
                         **({"device": "cpu"} if framework == "mxnet" else {}))
    assert check(ok) == []


def test_run_flags_and_a_sweep_entry_expand_alike():
    """`dlperf run` is a one-entry grid: the same entry gives the same points (order, keys,
    repeats) through the sweep path; the run path only names flags in its errors."""
    from dlperf.config import SweepConfig, expand_grid

    entry = {"model": ["fcn5_tiny", "lstm_tiny"], "batch_size": [8, 16], "device": "cpu",
             "mode": ["eager", "graph"], "compile_mode": ["default", "reduce-overhead"],
             "repeats": 2}
    run = expand_grid({}, [entry], cli=True)
    swept = SweepConfig(name="s", grid=[entry]).expand()
    assert [p.run_key() for p in run] == [p.run_key() for p in swept]
    assert len(run) == 2 * 2 * 3 * 2 and [p.measure.repeat for p in run[:12]] == [0] * 12
    with pytest.raises(ConfigError) as e:
        expand_grid({}, [{"model": "fcn5_tiny", "batch_size": 8, "threads": 0}], cli=True)
    assert str(e.value).startswith("--threads (threads):")
    with pytest.raises(ConfigError) as e:
        SweepConfig(name="s", grid=[{"model": "fcn5_tiny", "batch_size": 8, "threads": 0}]).expand()
    assert str(e.value).startswith("grid[0].threads:")


def test_config_cli_and_sweep_hold_no_framework_name_in_a_conditional():
    """Framework facts live in the registry and in frameworks/<name>/ (issue 19): no comparison,
    membership test, dict lookup or table keyed on a framework name in config/, cli/, sweep.py
    or report/sections.py (the old config.py had 9 such conditionals and 3 tables)."""
    import ast
    from pathlib import Path

    from dlperf.registry import FRAMEWORKS, TEST_DOUBLES

    names = set(FRAMEWORKS) | set(TEST_DOUBLES) | {"torch", "jax", "tensorflow", "mxnet", "fake"}
    src = Path(__file__).resolve().parents[2] / "src" / "dlperf"
    files = [*(src / "config").glob("*.py"), *(src / "cli").glob("*.py"), src / "sweep.py",
             src / "report" / "sections.py"]
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            tests = ([node.test] if isinstance(node, (ast.If, ast.IfExp, ast.While)) else
                     [node] if isinstance(node, ast.Compare) else
                     [node.slice] if isinstance(node, ast.Subscript) else
                     [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else [])
            for t in tests:
                for c in ast.walk(t):
                    if isinstance(c, ast.Constant) and c.value in names:
                        found.append(f"{path.name}:{c.lineno}: {c.value!r}")
    assert found == []


def test_a_sweep_path_that_is_not_a_regular_file_is_named_so(tmp_path):
    """``dlperf sweep /dev/null`` said "does not exist"; a missing path still does."""
    with pytest.raises(ConfigError, match="'/dev/null' is not a regular file"):
        load_sweep("/dev/null")
    with pytest.raises(ConfigError, match="does not exist"):
        load_sweep(tmp_path / "missing.yaml")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match="got an empty document"):
        load_sweep(tmp_path / "empty.yaml")
    (tmp_path / "int.yaml").write_text("3\n")
    with pytest.raises(ConfigError, match="got an int"):
        load_sweep(tmp_path / "int.yaml")


def test_with_article():
    from dlperf.errors import with_article

    assert [with_article(w) for w in ("int", "str", "Identity", "8-tuple", "2-tuple",
                                      "11-tuple", "18-tuple", "110-tuple")] == [
        "an int", "a str", "an Identity", "an 8-tuple", "a 2-tuple", "an 11-tuple",
        "an 18-tuple", "a 110-tuple"]


@pytest.mark.parametrize("field,value", [
    ("iterations", {"max_time_s": float("inf")}), ("timeout_s", float("inf")),
    ("ddp", {"bucket_cap_mb": float("inf")}), ("target_loss", float("nan")),
    ("iterations", {"max_warmup_time_s": float("inf")})])
def test_infinite_or_nan_numbers_are_refused_up_front(field, value):
    """`--max-time inf` passed the CLI, and every point then crashed in a worker whose config
    could not carry inf (a crash row stored); `--target-loss nan` was dropped silently."""
    with pytest.raises(ConfigError, match="finite number"):
        make_run_config(model="fcn5_tiny", batch_size=8, **{field: value})


def test_a_yaml_integer_cpu_bind_is_one_cpu_and_other_types_are_refused():
    assert make_run_config(model="fcn5_tiny", batch_size=8, device="cpu", cpu_bind=0).hardware.cpu_bind == "0"
    for bad in (True, [1], 1.5):
        with pytest.raises(ConfigError, match="cpu_bind"):
            make_run_config(model="fcn5_tiny", batch_size=8, device="cpu", cpu_bind=bad)
