"""``dlperf predict``: the iteration time of a configuration that was not measured, from stored
results (:mod:`dlperf.perfmodel.api`): another batch size, precision or mode, more GPUs or
nodes; ``--validate`` back-tests the model on the stored results."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import guard, print_markdown
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path


def _what_if(items: list[str]) -> dict[str, str] | None:
    """``["precision=bf16", "batch-size=2x"]`` -> ``{"precision": "bf16", "batch_size": "2x"}``.

    Raises:
        ConfigError: an item that is not KEY=VALUE, or a key given twice.
    """
    out: dict[str, str] = {}
    # "precision=bf16,mode=graph": two changes in one flag (no value holds a comma)
    items = [part for it in items for part in (it.split(",") if all(
        "=" in x for x in it.split(",")) else [it])]
    for it in items:
        key, sep, value = it.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"--what-if {it!r}: give KEY=VALUE, e.g. precision=bf16, "
                              "mode=graph, batch-size=2x or host_speed_ns=90")
        k = key.strip().replace("-", "_")
        if k in out:
            raise ConfigError(f"--what-if {k.replace('_', '-')} is given twice ({out[k]} and "
                              f"{value.strip()}); give it once")
        out[k] = value.strip()
    return out or None


def _whole(value: str | None, flag: str) -> int | None:
    """``--batch-size``'s text as a whole number: ``"64"`` -> 64, ``"1e4"`` -> 10000 (read
    exactly, so ``1e23`` is 10**23, refused by its limit with every digit); None stays None.

    Raises:
        ConfigError: not a finite whole number; one of 10**30 or more (``1e30``, ``1e999999``,
            not expanded to its digits) as over the batch limit, or below ``-10**30`` as
            below 1.
    """
    if value is None:
        return None
    from decimal import Decimal, InvalidOperation

    from dlperf.config.limits import MAX_BATCH

    try:
        return int(value)
    except ValueError:
        pass
    try:
        d = Decimal(value.strip())
        if d.is_finite() and d == d.to_integral_value():
            if abs(d) < Decimal(10) ** 30:
                return int(d)
            raise ConfigError(
                f"{flag} {value.strip()} is over dlperf's limit of {MAX_BATCH:,} samples "
                "(dlperf.config.limits: far above any real benchmark, below what breaks)"
                if d > 0 else f"{flag}: {value.strip()} must be >= 1")
    except InvalidOperation:
        pass
    raise ConfigError(f"{flag}: {value!r} is not a whole number; give e.g. {flag} 64")


def _headline(p: dict) -> str:
    """``LABEL on GPU: T ms per iteration [lo, hi] (90% interval), ...`` (LABEL: the
    configuration's :func:`dlperf.config.identity.label_of`); without an interval, why there
    is none."""
    from dlperf.config.identity import label_of

    c = p["config"]
    world = (c.get("nproc") or 1) * (c.get("nnodes") or 1)
    head = label_of({**c, "batch_size": c.get("global_batch"), "world_size": world})
    head += f" on {p['gpu']}" if p.get("gpu") else ""
    lo, hi = p["interval_s"]
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo == lo and hi == hi:
        iv = f" [{lo * 1e3:.3f}, {hi * 1e3:.3f}] ({p['interval_level']:.0%} interval)"
    else:
        iv = f" (no {p['interval_level']:.0%} interval: {p.get('interval_note') or 'none computed'})"
    return (f"{head}: {p['predicted_step_time_s'] * 1e3:.3f} ms per iteration{iv}, "
            f"{p['samples_per_s']:.1f} samples/s, {p['bound']}-bound")


def _as_given(point: str, given: Mapping[str, str]) -> str:
    """A stored point's ``file:id`` (its file resolved, as the prediction names it) with the
    file named as the ``--db`` arguments name it (``given``: resolved path -> path as given,
    the way the ``from:`` lines name it); a file not in ``given`` as it is."""
    path, _, rid = point.rpartition(":")
    return f"{given.get(path, path)}:{rid}" if path else point


def _measured(p: dict, given: Mapping[str, str] | None = None) -> list[str]:
    """Where the configuration predicted is itself stored: one line saying so, with its
    median and where, that the prediction withholds it (and how far it is from it), and so
    why neighbouring batches' predictions, which do not withhold it, can disagree with it;
    then the other files' measurements of it. ``[]`` where it is not stored. Files are named
    as ``given`` maps them (:func:`_as_given`)."""
    given = given or {}
    m = p.get("measured_step_time_s")
    if not m:
        return []
    pt = p["predicted_step_time_s"]
    err = (pt - m) / m
    off = (f"{abs(err):.0%} {'above' if err >= 0 else 'below'} it" if 0.5 < pt / m < 2
           else f"{max(pt / m, m / pt):.1f}x {'above' if pt > m else 'below'} it")
    at = f" in {_as_given(p['measured_point'], given)}" if p.get("measured_point") else ""
    out = [f"measured: b={p['config'].get('global_batch')} is stored ({m * 1e3:.3f} ms{at}); "
           f"this prediction withholds it, to be judged against it ({off}), so predictions at "
           "neighbouring batches, which fit it, need not be monotone with this one"]
    others = [f"{v * 1e3:.3f} ms in {_as_given(k, given)}" for k, v in (p.get("measured_points") or {}).items()
              if k != p.get("measured_point")]
    if others:
        out.append(f"also measured: {'; '.join(others)} (another host session)")
    return out


def _text(p: dict, given: Mapping[str, str] | None = None) -> str:
    """The prediction as a few readable lines (warnings right after the headline); stored
    points' files named as ``given`` maps them (:func:`_as_given`)."""
    c = p["config"]
    lines = [_headline(p), *_measured(p, given)]
    lines += [f"warning: {w}" for w in p.get("warnings") or []]
    if p.get("scaling_efficiency") is not None and (c.get("nproc") or 1) * (c.get("nnodes") or 1) > 1:
        lines.append(f"scaling efficiency {p['scaling_efficiency']:.1%}")
    parts = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in (p.get("parts") or {}).items()
                      if isinstance(v, (int, float)))
    if parts:
        lines.append(f"parts: {parts}")
    lines.append(f"how: {p['how']}")
    if p.get("host_session"):
        lines.append(f"host time from: {p['host_session']}")
    n = len(p["calibrated_on"])
    lines.append(f"calibrated on {n} stored result{'' if n == 1 else 's'}")
    if p.get("interval_group"):
        lines.append(f"interval from: {p['interval_group']}")
    lines += [f"from: {k}: {v}" for k, v in (p.get("provenance") or {}).items()]
    lines += [f"assumption: {a}" for a in p.get("assumptions") or []]
    return "\n".join(lines)


def two_modes_warning(calibrated_on: list[str]) -> str | None:
    """A warning naming the fitted points (``file:id`` of a prediction's ``calibrated_on``)
    whose measured step times have two modes, as ``dlperf compare`` flags a run it will not
    judge (:func:`dlperf.measure.spread.has_two_modes` of the stored ``measure`` samples);
    None where none has. The interval comes from other points' back-test and does not cover
    the spread of such a series (a CPU series of bimodal points predicted 3.48 ms
    [3.09, 3.96] against its withheld 1.42 ms)."""
    import sqlite3
    from contextlib import closing

    from dlperf.measure.spread import has_two_modes
    from dlperf.results.dbfile import file_uri

    flagged = []
    for fid in calibrated_on:
        f, _, i = fid.rpartition(":")
        try:  # read-only, no store (a prediction's start-up: tests/unit/test_predict_imports)
            with closing(sqlite3.connect(file_uri(f, "ro"), uri=True)) as db:
                xs = [t for (t,) in db.execute(
                    "SELECT step_time_s FROM samples WHERE result_id=? AND phase='measure' "
                    "ORDER BY idx", (int(i),))]
        except sqlite3.Error:  # the prediction read the file; a writer holding it: unjudged
            continue
        if has_two_modes(xs):
            flagged.append(fid)
    if not flagged:
        return None
    verb, them = ("has", "it") if len(flagged) == 1 else ("have", "them")
    return (f"{len(flagged)} of the {len(calibrated_on)} stored results the prediction is "
            f"fitted on ({', '.join(flagged)}) {verb} two modes in the measured step times: "
            "the interval, from the back-test of other points, may not cover that spread; "
            f"measure {them} again on a quiet host (dlperf run ... --repeats 3)")


def _ms(x: float) -> str:
    return f"{x * 1e3:.5g} ms"


def _row_z(term: str, target: float, sigma: float, side: str, e: dict) -> float:
    """A fit row's pull at the fit, ``log(fitted / target) / sigma`` (a one-sided row: 0 on its
    allowed side), the fitted value from ``H``, ``d0``, ``d1`` by :mod:`equations`."""
    import math

    from dlperf.perfmodel import equations as eq

    h, d0, d1 = e["H_s"], e["d0_s"], e["d1_s_per_sample"]
    if term.startswith(("T(B=", "D(B=")):
        b = float(term[4:-1])
        fitted = eq.step_s(h, d0 + d1 * b) if term[0] == "T" else d0 + d1 * b
    else:
        fitted = {"H": h, "d0": d0, "d1": d1}[term]
    z = math.log(fitted / target) / sigma
    return max(z, 0.0) if side == "<=" else z


def explain_text(e: dict) -> str:
    """``--explain``: :attr:`dlperf.perfmodel.api.Prediction.explanation` as lines, each
    equation with the numbers it was evaluated at (docs/perfmodel.md, What a prediction
    prints, and why)."""
    out = [f"explain: path {e.get('path')}"]
    s = e.get("series")
    if s:
        out.append(f"explain: series {s['file']}, batch sizes "
                   f"{', '.join(map(str, s['batch_sizes']))}")
        out.append(f"explain:   fit H = {_ms(s['H_s'])}, d0 = {_ms(s['d0_s'])}, "
                   f"d1 = {s['d1_s_per_sample'] * 1e3:.5g} ms/sample "
                   f"(rms log residual {s['rms_log']:.3g}); prior: {s['prior']}")
        out.append("explain:   rows of the least squares, each log(fitted / target) / sigma "
                   "(z: its value at the fit; '<=' rows cost only above the target):")
        for term, target, sigma, side, src in s["rows"]:
            unit = f"{target * 1e3:.5g} ms/sample" if term == "d1" else _ms(target)
            out.append(f"explain:     {term} {side} {unit}, sigma {sigma:.3g}, "
                       f"z {_row_z(term, target, sigma, side, s):+.2f}: {src}")
    r = e.get("roofline")
    if r:
        k = "no kernel term" if r["K"] is None else (
            f"K = {r['K']:.5g} kernels, t_k = {r['t_k'] * 1e6:.4g} us")
        out.append(f"explain: roofline of {r['config']}: F = f1 B, f1 = {r['f1']:.5g} "
                   f"FLOP/sample; Y = y0 + y1 B, y0 = {r['y0']:.5g} B, y1 = {r['y1']:.5g} "
                   f"B/sample ({r['bytes_source']}); P = {r['P']:.5g} FLOP/s, W = "
                   f"{r['W']:.5g} B/s ({r['ceiling_source']}); e_F = {r['e_F']:.4g}, "
                   f"e_Y = {r['e_Y']:.4g}, {k}")
        out.append(f"explain:   d1 = f1/(e_F P) + y1/(e_Y W) = "
                   f"{r['d1_s_per_sample'] * 1e3:.5g} ms/sample, d0 = y0/(e_Y W) + K t_k = "
                   f"{_ms(r['d0_s'])}")
        if r.get("d1_scale"):
            out.append(f"explain:   d1 prior = d1 x {r['d1_scale']:.4g}: "
                       f"{r['d1_scale_source']} (median log ratio, one vote per group)")
    w = e.get("what-if")
    if w:
        out.append(f"explain: what-if from {w['base']}: H_b = {_ms(w['H_b'])}, "
                   f"D_b = {_ms(w['D_b'])} (the series above at the batch)")
        out.append(f"explain:   r_H = {w['r_H']:.4g} ({w['r_H_rule']}), r_D = {w['r_D']:.4g} "
                   f"({w['r_D_rule']}), m = {w['m']:.4g}: H_t = H_b r_H m, D_t = D_b r_D m")
        ca = w.get("c_add")
        if ca:
            per = ", ".join(f"{m} {v * 1e6:.4g}" for m, v in ca["per_model_s"].items())
            out.append(f"explain:   added operators: H_b r_H = H_b + (n_t - n_b) c_add = "
                       f"{_ms(w['H_b'])} + ({ca['n_t']} - {ca['n_b']}) x "
                       f"{ca['median_s'] * 1e6:.4g} us; c_add = median of each other model's "
                       f"dH/dn (us per operator): {per}")
        for side in ("host", "device"):
            for model, src, b, r in w["pairs"].get(side) or []:
                out.append(f"explain:   {side}-bound pair {model} b={b} in {src}: T ratio "
                           f"{r:.4f}")
    o = e["one device"]
    hs = e.get("host speed")
    if hs:
        out.append(f"explain: host speed: H = {_ms(hs['H_before_s'])} x {hs['probe_ns']:g} / "
                   f"{hs['calibration_probe_ns']:.5g} ns (host_scaled_s) = {_ms(o['H_s'])}")
    dev = (f"d0 + d1 x {o['batch']} = " if s and not w else "") + _ms(o["D_s"])
    out.append(f"explain: one device at b={o['batch']}: H = {_ms(o['H_s'])}, D = {dev}; "
               f"step_s(H, D) = (H^8 + D^8)^(1/8) = {_ms(o['step_s'])}, {o['bound']}-bound")
    dp = e.get("data parallel")
    if dp:
        h, d, x = dp["H_s"], dp["D_s"], dp["X_s"]
        out.append(f"explain: {dp['world']} devices: rho = {dp['rho']:.4g}, kappa = "
                   f"{dp['kappa']:.4g} ({dp['pairs']} pairs), X = {_ms(x)} (WFBP over "
                   f"{dp['params']} parameters' buckets): dp_step_s = step_s(H (1 + rho), "
                   f"D + kappa H + X) = step_s({_ms(h * (1 + dp['rho']))}, "
                   f"{_ms(d + dp['kappa'] * h + x)})")
        bks = dp.get("buckets") or []
        if bks:
            out.append(f"explain:   all-reduce c(M): {dp['comm']}; WFBP over {len(bks)} "
                       f"bucket(s), backward ends at {_ms(dp['backward_s'])} "
                       "(s_i = max(r_i, e_(i-1)), e_i = s_i + c(M_i), X = max(0, e_last - "
                       "backward)):")
            for i, (m, r, c, st, en, algo) in enumerate(bks, 1):
                out.append(f"explain:     bucket {i}: M = {m / (1 << 20):.4g} MiB, r = "
                           f"{_ms(r)}, c(M) = {_ms(c)} ({algo}), s = {_ms(st)}, e = "
                           f"{_ms(en)}")
    if e.get("input_s"):
        out.append(f"explain: input: + {_ms(e['input_s'])} exposed input time")
    out.append(f"explain: step {_ms(e['step_s'])}")
    iv = e.get("interval")
    if iv:
        out.append(f"explain: interval: {iv['group']}, {iv['rows']} rows, {iv['method']} at "
                   f"{iv['level']:.3g}: {iv['ranks']}: ratios {iv['low_ratio']:.4f} and "
                   f"{iv['high_ratio']:.4f} x {_ms(iv['step_s'])}")
        if iv.get("widened"):
            lo, hi, why = iv["widened"]
            out.append(f"explain:   widened to {lo:.4f} and {hi:.4f}: {why}")
    return "\n".join(out)


def _dai(db: list[str], amortise_iters: int, format: str) -> None:
    """``--dai-table``: read the results files (folders: their ``*.db``) and print the table."""
    from dlperf.config.limits import MAX_AMORTISE_ITERS, over
    from dlperf.report import dai
    from dlperf.results.dbfile import results_files
    from dlperf.results.store import ResultStore

    if amortise_iters < 1:
        raise ConfigError(f"--amortise-iters must be at least 1, got {amortise_iters}")
    msg = over(amortise_iters, MAX_AMORTISE_ITERS, "iterations")
    if msg:
        raise ConfigError(f"--amortise-iters {msg}")
    files = results_files(db)
    records = {}
    for f in files:
        with ResultStore(f, read_only=True) as store:  # ConfigError for a missing file
            records[f] = store.records()
    rows = dai.dai_rows(records, amortise_iters)
    compiled = dai.compile_shares(records, amortise_iters)
    if format == "json":
        sys.stdout.write(json.dumps(dai.dai_json(rows, compiled), indent=1, default=str) + "\n")
    else:
        print_markdown(dai.dai_markdown(rows, compiled))


def predict(
    db: Annotated[list[str], typer.Option(help="Results file(s) or folder(s) whose stored results calibrate the model (repeatable).")] = [common.DEFAULT_DB],  # noqa: B006 - typer reads it
    model: Annotated[str | None, typer.Option(help="Model to predict.")] = None,
    framework: Annotated[str | None, typer.Option(help="Framework (if several are stored).")] = None,
    mode: Annotated[str | None, typer.Option(help="Mode (if several are stored).")] = None,
    precision: Annotated[str | None, typer.Option(help="Precision (if several are stored).")] = None,
    device: Annotated[str | None, typer.Option(help="Device (if several are stored); with --validate, the GPU model back-tested where the files hold several.")] = None,
    data: Annotated[str | None, typer.Option(help="Data of the stored series (synthetic, imagefolder, mnist, ...), if several are stored.")] = None,
    layout: Annotated[str | None, typer.Option(help="Image layout of the stored series (auto, nchw, nhwc), if several are stored.")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads of the stored series, if several are stored (CPU thread sweeps).")] = None,
    loader_workers: Annotated[int | None, typer.Option(help="Input-pipeline workers of the stored series, if several are stored; a count not stored is predicted from the stored ones (the input scaled from the nearest).")] = None,
    grad_accum: Annotated[int | None, typer.Option(help="Gradient accumulation of the stored series, if several are stored.")] = None,
    compile_mode: Annotated[str | None, typer.Option(help="Compile mode of the stored graph series (default, reduce-overhead, ...), if several are stored.")] = None,
    batch_size: Annotated[str | None, typer.Option("--batch-size", "-b", help="Global mini-batch to predict: a whole number >= 1 (1e4 is read as 10000).")] = None,
    nproc: Annotated[int, typer.Option(help="Devices per node (data parallel when nproc x nnodes > 1).")] = 1,
    nnodes: Annotated[int, typer.Option(help="Nodes (more than one needs --network).")] = 1,
    network: Annotated[str | None, typer.Option(help="Inter-node link: ib_ndr, eth100, nvlink4, pcie5 (docs/perfmodel.md gives their alpha/beta and sources); required with --nnodes > 1.")] = None,
    nics_per_node: Annotated[int | None, typer.Option(help="Inter-node NICs of one node (default: 8 for ib_ndr, as on a DGX H200; 1 for eth100).")] = None,
    what_if: Annotated[list[str], typer.Option("--what-if", help="Predict a changed configuration from this one's measurements: precision=bf16, mode=graph, framework=jax, batch-size=2x (or =256), host_speed_ns=90 (repeatable).")] = [],  # noqa: B006
    validate: Annotated[bool, typer.Option("--validate", help="Back-test the model on the stored results: MdAPE, max and count per category (held-out batch, extrapolate 2x, leave-one-model-out, what-if sign, all-reduce, 2-GPU), and the 90% prediction intervals' leave-one-out coverage per category and bound; writes the residual table predictions take their intervals from beside the results files (perfmodel_residuals.json). In a checkout with benchmarks/results/split.json, also each category's development / test side of the frozen split.")] = False,
    dai_table: Annotated[bool, typer.Option("--dai-table", help="Dai et al.'s table: per stored --breakdown/--trace result the share of the step in I/O, copy, exposed host work, device work by op class and graph optimisation, with the seed study's findings checked (docs/perfmodel.md).")] = False,
    amortise_iters: Annotated[int, typer.Option(help="With --dai-table: iterations a one-off graph optimisation (compile) is amortised over.")] = 10_000,
    format: Annotated[str, typer.Option(help="text or json.")] = "text",
    explain: Annotated[bool, typer.Option("--explain", help="Also print the numbers the prediction was made of, to check by hand against src/dlperf/perfmodel/equations.py: the series and every row of its fit (points, priors, probes, anchors; z: the row's pull at the fit), H, d0, d1, a what-if's ratios and their pairs, rho, kappa and X for N devices, the interval's rows and ranks (docs/perfmodel.md, What a prediction prints). Costs no fit.")] = False,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Predict on this GPU by replaying stored per-kernel timelines (docs/replay.md): a `dlperf calibrate` profile's name, or a datasheet's exact name (h100, h100-sxm, 'NVIDIA H100 80GB HBM3', h200, a100, l40s, ...; case and separators ignored; then marked datasheet only). With --nproc N: DDP over N such GPUs of one node, the step-level model's data parallel (DDP overhead, WFBP all-reduce) on the one-GPU replay (not back-tested with the replay; its assumptions are printed).")] = None,
) -> None:
    """Predict the iteration time, throughput and scaling efficiency of a configuration from stored results (the performance model, docs/perfmodel.md)."""
    def body() -> None:
        from dlperf.perfmodel import api

        batch = _whole(batch_size, "--batch-size")
        for flag, value, low in (("--batch-size", batch, 1), ("--nproc", nproc, 1),
                                 ("--nnodes", nnodes, 1), ("--nics-per-node", nics_per_node, 1),
                                 ("--threads", threads, 1),
                                 ("--loader-workers", loader_workers, 0),
                                 ("--grad-accum", grad_accum, 1)):
            if value is not None and value < low:  # the style of dlperf run's counts
                raise ConfigError(f"{flag}: {value} must be >= {low}")
        if format not in ("text", "json"):
            raise ConfigError(f"--format {format!r}: give text or json")
        if db == [common.DEFAULT_DB] and not os.path.exists(common.DEFAULT_DB):
            raise ConfigError(f"no --db given, and the default results file "
                              f"{common.DEFAULT_DB!r} is not in the current folder "
                              f"({os.getcwd()}): give --db with a results file (*.db) or a "
                              "folder of them (repeatable), e.g. --db benchmarks/results/h200 "
                              "in a checkout of dlperf")
        picks = {"--model": model, "--framework": framework, "--mode": mode,
                 "--precision": precision, "--device": device, "--data": data,
                 "--layout": layout, "--threads": threads, "--loader-workers": loader_workers,
                 "--grad-accum": grad_accum, "--compile-mode": compile_mode,
                 "--batch-size": batch, "--network": network,
                 "--what-if": what_if or None, "--nproc": nproc if nproc != 1 else None,
                 "--nnodes": nnodes if nnodes != 1 else None, "--nics-per-node": nics_per_node}
        given = [k for k, v in picks.items() if v is not None]
        if validate and dai_table:
            raise ConfigError("--validate and --dai-table are two reports: give one of them "
                              "(run the command twice for both)")
        if (validate or dai_table) and explain:
            given.append("--explain")
        if validate and device is not None:  # picks the GPU model validated: not ignored
            given.remove("--device")
        if (validate or dai_table) and given:
            whole = "--validate back-tests" if validate else "--dai-table splits"
            raise ConfigError(f"{whole} every stored result of the --db files; "
                              f"{', '.join(given)} would be ignored: drop "
                              f"{'it' if len(given) == 1 else 'them'}, or give a --db file "
                              "holding only what you want judged")
        if dai_table:
            _dai(db, amortise_iters, format)
            return
        if validate:
            from dlperf import validation

            v = validation.validate(db, device=device)
            if not v.rows:  # an empty table, exit 0 and an empty residual table said nothing
                raise ConfigError(
                    f"--validate: the back-test made no row from {', '.join(map(shown_path, db))}"
                    ": nothing to judge, so no table is printed and no residual table written; "
                    "it needs stored results to predict from others, e.g. one configuration at "
                    "two batch sizes or more (dlperf run --model M -b 16,64 --db FILE)")
            if format == "json":  # each category with its interval coverage, where it has one
                cov = {d["category"]: d for d in v.coverage()}
                rows = [{**d, "interval_coverage_90": cov.get(d["category"])}
                        for d in v.summary()]
                sys.stdout.write(json.dumps(rows, indent=1, default=str) + "\n")
            else:
                print_markdown(v.table())
                print_markdown("\nPrediction intervals, leave-one-out over the rows above: the "
                               "share of measurements inside their 90% interval (overall / "
                               "host-bound / device-bound) and the median interval width "
                               "(high / low), the pooled rule beside the Mondrian one "
                               "predictions use (docs/perfmodel.md, Prediction interval)\n\n"
                               + v.coverage_table())
                from dlperf.validation import split

                if split.DEFAULT_PATH.is_file():  # a checkout: the README's test numbers
                    frozen = split.load()
                    covs = v.side_coverage(frozen)
                    print_markdown("\nThe same, development / test side of the frozen split "
                                   f"({shown_path(split.DEFAULT_PATH)}):\n\n"
                                   + v.split_table(frozen, coverage=covs))
                    print_markdown("\nEach interval cell's coverage against 90% on its own "
                                   "sampling spread, development / test (docs/perfmodel.md, "
                                   "\"Is a cell's coverage consistent with 90%?\"):\n\n"
                                   + v.consistency_table(frozen, coverage=covs))
            try:  # after the report: a folder that cannot be written loses none of it
                table = validation.store_table(db, v, device)
            except ConfigError as e:
                common.err.print(f"warning: no residual table stored: {e}", highlight=False)
                return
            if format != "json":
                common.out.print(f"\nresidual table for predictions' intervals: "
                                 f"{shown_path(table)}", markup=False,
                                 highlight=False)
            return
        if model is None or batch is None:
            missing = " and ".join(f for f, v in (("--model", model), ("--batch-size", batch))
                                   if v is None)
            raise ConfigError(f"{missing} missing: give --model and --batch-size (e.g. --model "
                              "resnet50 -b 64), or --validate to back-test the model")
        from dlperf.config.limits import (
            MAX_BATCH,
            MAX_GRAD_ACCUM,
            MAX_NODES,
            MAX_PROCESSES,
            MAX_THREADS,
            MAX_WORKERS,
            over,
        )

        for flag, value, limit, what in (("--batch-size", batch, MAX_BATCH, "samples"),
                                         ("--nproc", nproc, MAX_PROCESSES, "processes"),
                                         ("--nnodes", nnodes, MAX_NODES, "nodes"),
                                         ("--nics-per-node", nics_per_node, MAX_PROCESSES,
                                          "NICs per node"),
                                         ("--threads", threads, MAX_THREADS, "threads"),
                                         ("--loader-workers", loader_workers, MAX_WORKERS,
                                          "loader workers"),
                                         ("--grad-accum", grad_accum, MAX_GRAD_ACCUM,
                                          "micro-batches per step")):
            msg = over(value, limit, what)
            if msg:
                raise ConfigError(f"{flag} {msg}")
        if gpu is not None:  # the timeline replay's answer (dlperf.perfmodel.gpuanswer)
            from dlperf.perfmodel import gpuanswer
            if nnodes > 1 or network or what_if:
                raise ConfigError("--gpu replays one node's GPUs: --nnodes, --network and "
                                  "--what-if are the step-level model's (drop --gpu for them)")
            # each flag the replay cannot honour, with why (a stored CUDA timeline of one GPU's
            # step: synthetic data, the framework's own layout, default compile mode, one
            # micro-batch; no least-squares fit)
            ignored = [f"{k} ({why})" for k, on, why in (
                ("--device " + str(device), device not in (None, "cuda"),
                 "it replays CUDA timelines only"),
                ("--threads", threads is not None, "a CPU run's thread count; a GPU's "
                 "timeline has none"),
                ("--data " + str(data), data not in (None, "synthetic"),
                 "the stored timelines ran on synthetic data: no input pipeline to replay"),
                ("--layout " + str(layout), layout not in (None, "auto"),
                 "the stored timelines ran at the framework's own layout"),
                ("--loader-workers", loader_workers is not None,
                 "no input pipeline in a synthetic-data timeline"),
                ("--grad-accum", grad_accum not in (None, 1),
                 "the stored timelines are steps of one micro-batch"),
                ("--compile-mode " + str(compile_mode), compile_mode not in (None, "default"),
                 "the stored timelines ran at the default compile mode"),
                ("--explain", explain, "a replay fits nothing to explain; its output names "
                 "what it assumes")) if on]
            if ignored:
                raise ConfigError(
                    "--gpu replays a stored timeline and cannot honour "
                    f"{'; '.join(ignored)}: drop {'it' if len(ignored) == 1 else 'them'}, or "
                    "drop --gpu for the step-level model")
            r = gpuanswer.answer(db, model, framework, mode, precision, batch, gpu,
                                 nproc=nproc)
            sys.stdout.write(json.dumps(r, indent=1, default=str) + "\n" if format == "json"
                             else gpuanswer.text(r) + "\n")
            return
        if nics_per_node is not None and not network:
            raise ConfigError(f"--nics-per-node {nics_per_node} counts the NICs of the "
                              "inter-node link: give --network with it (e.g. --network ib_ndr "
                              "--nnodes 2), or drop it: it would be ignored")
        import warnings

        from dlperf.results.rowcheck import DamagedRows

        with warnings.catch_warnings():  # the prediction's own warnings (or refusal) say it
            warnings.simplefilter("ignore", DamagedRows)
            p = api.predict(db, model, framework=framework, mode=mode, precision=precision,
                            device=device, batch_size=batch, nproc=nproc, nnodes=nnodes,
                            network=({"inter": network, "nics_per_node": nics_per_node}
                                     if nics_per_node is not None and network else network),
                            what_if=_what_if(what_if), data=data, layout=layout,
                            loader_workers=loader_workers, threads=threads,
                            grad_accum=grad_accum, compile_mode=compile_mode
                            ).to_dict(explain=explain)
        noisy = two_modes_warning(p["calibrated_on"])
        if noisy:
            p["warnings"] = [*p["warnings"], noisy]
        if any(x != x for x in p["interval_s"]):  # no interval: null in JSON, not NaN
            p["interval_s"] = [None, None]
        if format == "json":
            sys.stdout.write(json.dumps(p, indent=1, default=str) + "\n")
            return
        from dlperf.results.dbfile import results_files

        as_given = {os.path.realpath(f): f for f in results_files(db)}
        text = _text(p, as_given) + ("\n" + explain_text(p["explanation"]) if explain else "")
        common.out.print(shown_path(text, lines=True), markup=False, highlight=False)

    guard(body)
