"""What a prediction asks for, checked and resolved before anything is fitted.

:func:`dlperf.perfmodel.api.predict` (and ``dlperf predict`` through it) calls these to turn
its arguments into the stored configuration it predicts from:

* :func:`check_names`: the model, framework, mode, precision and device given are ones dlperf
  knows (the zoo, :mod:`dlperf.registry`: each framework's modes, precisions and devices, as
  ``dlperf run`` validates them) or ones stored in the results;
* :func:`resolve`: the one stored configuration that matches, with the selectors
  (:data:`SELECTORS`: data, layout, loader workers, threads, gradient accumulation) that tell
  stored series apart; several left: the default one, said so, or a refusal that lists each
  one with the flags that select it;
* :func:`apply_what_if`: a ``what_if`` mapping parsed and range-checked, and
  :func:`check_target` on the configuration it gives;
* :func:`check_divisible`, :func:`check_scale_out`: a global batch the devices split evenly,
  no more GPUs on a node than a node holds (:data:`MAX_GPUS_PER_NODE`), and N devices only of
  a device with a stored data-parallel run;
* :func:`extrapolation`: the warning for a batch far outside the measured series;
* :class:`Request`: what the checked arguments resolve to, which the prediction is composed
  from.

All raise :class:`~dlperf.errors.ConfigError` with what is wrong and how to fix it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.errors import ConfigError, unknown_choice
from dlperf.perfmodel import comm, memory, special
from dlperf.perfmodel.calibrate import Config
from dlperf.perfmodel.records import Point, Records
from dlperf.registry import COMPILE_MODES, FRAMEWORKS, framework_info

#: The fields beyond framework/mode/precision/device that tell stored one-device series of a
#: model apart: field -> (the value a run without the option stores, the ``dlperf predict``
#: flag that selects it). ``None`` cannot be given as a flag: it is the framework's default.
SELECTORS: dict[str, tuple[Any, str]] = {
    "data": ("synthetic", "--data"), "layout": ("auto", "--layout"),
    "loader_workers": (None, "--loader-workers"), "threads": (None, "--threads"),
    "grad_accum": (1, "--grad-accum"), "compile_mode": ("default", "--compile-mode")}

#: The fields of :class:`Config` that name a configuration's group (what an analytic
#: prediction needs given).
CORE = ("framework", "mode", "precision", "device")

#: Every field of :class:`Config` a request can fix, with its ``dlperf predict`` flag.
FLAGS: dict[str, str] = {"framework": "--framework", "mode": "--mode",
                         "precision": "--precision", "device": "--device",
                         **{k: flag for k, (_, flag) in SELECTORS.items()}}

#: The most configurations a message lists.
MAX_LISTED = 15

#: Image layouts a run can ask for (``dlperf run --layout``), lower case as stored.
LAYOUTS = ("auto", "nchw", "nhwc")

#: Whether a measured series covers a batch: the prediction extrapolates from this factor
#: times the largest measured batch on (or the smallest over it and below).
EXTRAPOLATION_FACTOR = 2.0


def _one_device(recs: Records) -> list[Config]:
    return sorted({Config.of(p) for p in recs.points if p.world_size == 1}, key=_order)


def _order(c: Config) -> tuple:
    # numbers in numeric order, None (the default) first
    return tuple((v is not None, v if isinstance(v, (int, float)) else 0, str(v))
                 for v in (c.model, c.framework, c.mode, c.precision, c.device, c.data,
                           c.layout, c.loader_workers, c.threads, c.grad_accum,
                           c.compile_mode))


def _registry_union(attr: str) -> set[str]:
    return {v for info in FRAMEWORKS.values() for v in getattr(info, attr)}


def check_names(recs: Records, model: str, fields: Mapping[str, Any]) -> None:
    """Refuse a name dlperf does not know before any stored configuration is looked for.

    Args:
        recs: the loaded results (their stored values are always accepted: a file written by
            another version or a test framework).
        model: the model; a plain name that is neither stored nor a zoo/entry-point model is
            refused (``dlperf.zoo.get_spec``'s "unknown model ... did you mean" message); a
            source name (``hf:``, ``timm:``, ``file:``) is not built here.
        fields: ``framework``, ``mode``, ``precision``, ``device`` and :data:`SELECTORS`
            values (None: not given).

    Raises:
        ConfigError: an unknown model, framework, mode, precision, device, layout or compile
            mode; the message names the close match and the valid choices.
    """
    stored = [Config.of(p) for p in recs.points]
    if ":" not in model and model not in {c.model for c in stored}:
        from dlperf.zoo import get_spec

        try:
            get_spec(model)
        except ConfigError as e:
            raise ConfigError(f"{e}; and no stored one-device point of {model} is in the "
                              "results given") from None
    fw = fields.get("framework")
    info = framework_info(fw)
    for key, (known, attr) in _names().items():
        value = fields.get(key)
        if value is None:
            continue
        if known is not None and value not in (allowed := known | {getattr(c, key)
                                                                     for c in stored}):
            raise unknown_choice(key, value, allowed)
        if info is not None and attr is not None:
            _framework_has(info, str(fw), key, attr, value,
                           {getattr(c, key) for c in stored if c.framework == fw})


def _names() -> dict[str, tuple[set[str] | None, str | None]]:
    """The names a request may give, in the order they are checked: field -> (every value
    dlperf knows besides the stored ones, None where another check refused an unknown one
    already; the registry attribute that limits it per framework or None). A device is
    :func:`device_for`'s, which :func:`dlperf.perfmodel.api.predict` calls before
    :func:`check_names` and which returns a device kind of a stored point or refuses (the
    one caller, :func:`check_target`, gives a framework alone)."""
    return {"framework": (set(FRAMEWORKS), None),
            "mode": (_registry_union("modes"), "modes"),
            "precision": (_registry_union("precisions"), "precisions"),
            "device": (None, "devices"),
            "layout": (set(LAYOUTS), None), "compile_mode": (set(COMPILE_MODES), None)}


def _framework_has(info: Any, fw: str, key: str, attr: str, value: str,
                   stored: set[str]) -> None:
    """Refuse ``value`` of ``key`` when neither the framework's registry entry (its ``attr``)
    nor a stored point of the framework has it."""
    if value not in set(getattr(info, attr)) | stored:
        note = f" ({info.devices_note})" if key == "device" and info.devices_note else ""
        raise ConfigError(f"{key} {value!r} is not available for framework {fw!r}, "
                          f"which has {' and '.join(getattr(info, attr))} only{note}; give "
                          f"--{key} {' or '.join(getattr(info, attr))}")


def calibrated_devices(recs: Records) -> dict[str, list[str]]:
    """Device kind (``cuda``, ``cpu``) -> the names of the devices of that kind the stored
    one-device points ran on (``NVIDIA H200``; a CPU's model from its session), sorted."""
    out: dict[str, set[str]] = {}
    for p in recs.points:
        if p.world_size == 1:
            name = p.device_name or (p.cpu_model or "" if p.device == "cpu" else "")
            out.setdefault(p.device, set()).add(name)
    return {d: sorted(v - {""}) for d, v in sorted(out.items())}


def gpu_models(recs: Records) -> list[str]:
    """The names of the GPU models (``NVIDIA H200``, ``NVIDIA H100 80GB HBM3``) the stored
    ``cuda`` points ran on (any device count; a point that recorded no name is not counted),
    sorted."""
    return sorted({p.device_name for p in recs.points if p.device == "cuda" and p.device_name})


def _gpu_short(name: str) -> str | None:
    """The ``--gpu`` short name (a datasheet's: ``h100``) of a driver's GPU name, if any."""
    from dlperf.perfmodel.hardware import short_name

    return short_name(name)


def matching_gpus(gpus: Sequence[str], device: str | None) -> list[str]:
    """The GPU models of ``gpus`` a ``--device`` value names: its full name (without case),
    else ``--gpu``'s short name of it (``h100``), else those whose name holds it; none for
    None or ``cuda`` where no name is ``cuda``."""
    want = (device or "").strip().lower()
    return ([g for g in gpus if g.lower() == want]
            or [g for g in gpus if _gpu_short(g) == want]
            or [g for g in gpus if want and want in g.lower()])


def device_value(gpu: str, gpus: Sequence[str]) -> str:
    """The ``--device`` value that picks ``gpu`` among ``gpus`` (:func:`matching_gpus`): its
    short name (``h100``) where no other of ``gpus`` has it, else its quoted full name."""
    short = _gpu_short(gpu)
    return short if short and [_gpu_short(g) for g in gpus].count(short) == 1 else repr(gpu)


def gpu_of(recs: Records, device: str | None) -> tuple[str | None, str | None]:
    """``(device, GPU)``: the GPU model a request's ``device`` selects where ``recs`` hold
    ``cuda`` points of several GPU models (a GPU is part of a configuration's identity: the
    points of two GPU models are never fitted together, :func:`for_gpu`), else ``(device,
    None)``. ``device`` selects a GPU by its name (``NVIDIA H100 80GB HBM3``, without case),
    by ``--gpu``'s short name of it (``h100``, :func:`dlperf.perfmodel.hardware.short_name`)
    or by a part of its name; the GPU selected comes back with ``cuda`` as the device. A
    device of another kind (``cpu``, a CPU's name) or a name no GPU matches is returned as it
    is, for :func:`device_for`.

    Raises:
        ConfigError: several GPU models loaded and ``device`` None, ``cuda`` or a name that
            matches several of them, with the ``--device`` value of each.
    """
    gpus = gpu_models(recs)
    if len(gpus) < 2:
        return device, None
    hits = matching_gpus(gpus, device)
    if len(hits) == 1:
        return "cuda", hits[0]
    if device is not None and device != "cuda" and not hits:
        return device, None
    picks = "; ".join(f"--device {v} or --device '{g}'" if (v := device_value(g, gpus)) != repr(g)
                      else f"--device {v}" for g in gpus)
    said = "no --device" if device is None else f"--device {device}"
    raise ConfigError(f"{said} is ambiguous: these results files hold CUDA points of "
                      f"{len(gpus)} GPU models ({', '.join(gpus)}), and the model is "
                      f"calibrated on one GPU model at a time (their points are never fitted "
                      f"together); pick one: {picks}")


def for_gpu(recs: Records, gpu: str | None) -> Records:
    """The records of the results files of the GPU model ``gpu``, in their loaded order,
    without their ``cuda`` points and collectives of other GPU models (and ``cuda`` points
    that recorded no GPU name): what a prediction on ``gpu`` calibrates on (:func:`gpu_of`),
    the same records as those files alone where no file mixes GPU models. A file of ``gpu``
    holds a point or collective of it, or no ``cuda`` point or collective of any named GPU
    (a CPU file) in a folder whose GPU files are of ``gpu`` alone (``h200/cpu_threads.db``
    beside ``h200/*.db``: ``--device h200`` with ``h100`` loaded reads what ``h200`` alone
    does, and its residual table). ``gpu`` None: ``recs`` itself."""
    if gpu is None:
        return recs
    gpus_of: dict[str, set[str]] = {}
    for p in recs.points:
        if p.device == "cuda" and p.device_name:
            gpus_of.setdefault(p.source, set()).add(p.device_name)
    for c in recs.collectives:
        if c.device_name:
            gpus_of.setdefault(c.source, set()).add(c.device_name)
    folder_gpus: dict[str, set[str]] = {}
    for f, names in gpus_of.items():
        folder_gpus.setdefault(os.path.dirname(os.path.realpath(f)), set()).update(names)
    # every point and collective names its file, one of recs.sources (records.load)
    sources = [f for f in recs.sources
               if (gpu in gpus_of[f] if f in gpus_of
                   else folder_gpus.get(os.path.dirname(os.path.realpath(f))) == {gpu})]
    files = set(sources)
    pts = [p for p in recs.points if p.source in files
           and (p.device != "cuda" or p.device_name == gpu)]
    colls = [c for c in recs.collectives if c.source in files and c.device_name in (None, gpu)]
    return Records(pts, colls, sources, {f: d for f, d in recs.damaged.items() if f in files})


def device_for(recs: Records, device: str | None) -> str | None:
    """The stored device kind a request's ``device`` means: a kind measured in ``recs``
    (``cuda``), or a device name one of them ran on, matched without case as a word or part
    of the name (``H200``, ``NVIDIA H200``); None stays None (the stored one). The one place
    a prediction's device is looked up: a device never measured is refused.

    Raises:
        ConfigError: a device no stored point ran on, with the calibrated devices listed.
    """
    cal = calibrated_devices(recs)
    if device is None or device in cal:
        return device
    hits = {d for d, names in cal.items() for n in names if device.lower() in n.lower()}
    if len(hits) == 1:
        return hits.pop()
    listed = "; ".join(f"{d} ({', '.join(n) or 'name not recorded'})" for d, n in cal.items())
    from dlperf.perfmodel.hardware import DATASHEETS, short_name

    # a device kind such as 'cuda', or no datasheet's name: the datasheet GPUs listed
    gpu = (f"--gpu {device} (a datasheet GPU: docs/replay.md)" if short_name(device) else
           f"--gpu NAME, NAME one of the datasheet GPUs {', '.join(DATASHEETS)} (docs/replay.md)")
    raise ConfigError(f"device {device!r} was never measured in these results files, and the "
                      "model predicts only a device it was calibrated on (its measured "
                      f"ceilings, host and step times): calibrated here: {listed or 'none'}; "
                      "give one of those, measure the device (dlperf run --device ...) and "
                      "add its results file, or replay a stored trace on a GPU never measured "
                      f"with {gpu}")


def check_target(recs: Records, cfg: Config, where: str) -> None:
    """Refuse a what-if's configuration to predict that its framework cannot run: a mode,
    precision or device not in its registry entry; the fix is another ``--what-if`` value
    (``--device`` for a device). A configuration whose framework/mode/precision/device is
    stored is accepted as it is.

    Args:
        where: the ``--what-if`` flags as given, for the message (``"--what-if
            framework=jax"``).

    Raises:
        ConfigError: a framework dlperf does not know (:func:`check_names`' refusal); a mode,
            precision or device naming the framework's and the fix.
    """
    if any(Config.of(p).group == cfg.group for p in recs.points):
        return
    check_names(recs, cfg.model, {"framework": cfg.framework})  # refused as when given
    info = framework_info(cfg.framework)
    if info is None:  # a stored framework the registry does not know
        return
    title = info.title or cfg.framework
    for key, attr in (("mode", "modes"), ("precision", "precisions"), ("device", "devices")):
        allowed = getattr(info, attr)
        value = getattr(cfg, key)
        known = _registry_union(attr) | {getattr(Config.of(p), key) for p in recs.points}
        if value not in known:
            raise ConfigError(f"{where}: {unknown_choice(key, value, known)}")
        if value not in allowed:
            fix = (f"add --what-if {key}={allowed[0]}" + (
                f" (or {', '.join(allowed[1:])})" if len(allowed) > 1 else "")
                if key != "device"
                else f"give --{key} {' or '.join(allowed)}")
            raise ConfigError(f"{where} asks for {cfg.label()}, but {title} has no {key} "
                              f"{value!r} (its {attr}: {', '.join(allowed)}); {fix}")


def _files(recs: Records) -> str:
    return _listed(recs.sources, ", ", " and {left} more files", limit=3)


def _flag_value(key: str, value: Any) -> str:
    return f"{FLAGS[key]} {value}" if value is not None else f"(no {FLAGS[key]})"


def _selecting_flags(c: Config, keys: Iterable[str]) -> str:
    return " ".join(_flag_value(k, getattr(c, k)) for k in keys)


def _and(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return ", ".join([*words[:-2], " and ".join(words[-2:])])


def _listed(items: list[str], sep: str, more: str, limit: int = MAX_LISTED) -> str:
    """``items`` joined by ``sep``, at most ``limit`` of them, then ``more`` where some were
    left out, its ``{all}`` their count and ``{left}`` how many were left out."""
    return sep.join(items[:limit]) + (more.format(all=len(items), left=len(items) - limit)
                                      if len(items) > limit else "")


def _describe(model: str, given: Mapping[str, Any]) -> str:
    return " ".join([model, *(f"{FLAGS[k]} {v}" for k, v in given.items() if v is not None)])


def resolve(recs: Records, model: str, given: Mapping[str, Any]) -> tuple[Config, str | None]:
    """The stored one-device configuration of ``model`` that ``given`` selects.

    Args:
        recs: the loaded results.
        model: the model.
        given: :data:`FLAGS`' fields (None: not given).

    Returns:
        ``(config, note)``: ``note`` is None when one configuration matched, else the sentence
        saying that several matched, that the one with every unspecified selector at its
        default (:data:`SELECTORS`) was used, and which flags select the others. With nothing
        stored but framework, mode, precision and device all given: that configuration (to
        predict analytically), its selectors as given.

    Raises:
        ConfigError: nothing stored at all; a selector value no stored series of that
            configuration has (the stored values listed); no match and not enough given for
            an analytic prediction (the stored configurations listed); several match and no
            single default (each listed with the flags that select it).
    """
    stored = _one_device(recs)
    if not stored:
        raise ConfigError(f"no stored one-device results in {_files(recs) or 'these folders'}:"
                          " nothing to calibrate a prediction on; store some with `dlperf run "
                          "... --db FILE` first")

    def match(c: Config, keys: Iterable[str]) -> bool:
        return c.model == model and all(given.get(k) is None or getattr(c, k) == given[k]
                                        for k in keys)
    picked = {k: given[k] for k in SELECTORS if given.get(k) is not None}
    # every selector as given, else at the value a run without its option stores
    wanted = {k: d for k, (d, _) in SELECTORS.items()} | picked
    cands = [c for c in stored if match(c, FLAGS)]
    if len(cands) == 1:
        return cands[0], None
    if not cands:
        return _unstored_workers(stored, given, match) or (
            _no_match(recs, model, given, stored, match, picked, wanted), None)
    default = [c for c in cands if all(getattr(c, k) == v for k, v in wanted.items())]
    differ = [k for k in FLAGS if len({getattr(c, k) for c in cands}) > 1]
    # framework/mode/precision/device (each may have one default), and the selectors
    core = [k for k in differ if k not in SELECTORS]
    selectors = [k for k in differ if k in SELECTORS]
    if len(default) == 1:
        pick = default[0]
        others = "; ".join(_selecting_flags(c, [k for k in differ if getattr(c, k) !=
                                                getattr(pick, k)]) for c in cands if c != pick)
        return pick, (f"{len(cands)} stored configurations match {_describe(model, given)}; "
                      f"predicted {pick.label()}, the one with the default "
                      f"{_and([FLAGS[k] for k in selectors])}; for another add {others}")
    # differing in framework/mode/precision/device: those first, the selectors said after
    shown = core or selectors
    options = list(dict.fromkeys(_selecting_flags(c, shown) for c in cands))
    raise ConfigError(f"several stored configurations match {_describe(model, given)}; they "
                      f"differ in {_and([FLAGS[k] for k in shown])}"
                      + (f" (and some in {_and([FLAGS[k] for k in selectors])})"
                         if core and selectors else "") + ": add one of "
                      + _listed(options, "; ", "; ... ({all} in all)"))


def _unstored_workers(stored: list[Config], given: Mapping[str, Any],
                      match: Callable[[Config, Iterable[str]], bool]
                      ) -> tuple[Config, str] | None:
    """A loader-worker count no stored series has, of a configuration whose other worker
    counts are stored (one ladder: every other field selects a single configuration): that
    configuration at the asked count, whose input part :mod:`dlperf.perfmodel.inputpipe`
    scales from the nearest measured count, and the note saying so. None otherwise."""
    # called when nothing matched all of given: with no worker count given, no stored
    # configuration matches the other fields either, and there is no ladder
    w = given.get("loader_workers")
    others = FLAGS.keys() - {"loader_workers"}
    rungs = {c: n for c in stored if (n := c.loader_workers) is not None and match(c, others)}
    ladder = {c.with_(loader_workers=w) for c in rungs}
    if len(ladder) != 1:
        return None
    cfg = next(iter(ladder))
    counts = sorted(set(rungs.values()))
    return cfg, (f"no stored series of {cfg.label()}: its input part is scaled from the "
                 f"nearest of the stored worker counts ({', '.join(map(str, counts))}), its "
                 "compute part is the synthetic-data step")


def _no_match(recs: Records, model: str, given: Mapping[str, Any], stored: list[Config],
              match: Callable[[Config, Iterable[str]], bool], picked: Mapping[str, Any],
              wanted: Mapping[str, Any]) -> Config:
    """:func:`resolve` when nothing matches: a selector no stored series has, else the
    configuration to predict analytically (its selectors ``wanted``), else the refusal listing
    what is stored. ``picked``: the selectors given."""
    core = {k: given.get(k) for k in CORE}
    near = [c for c in stored if match(c, CORE)]
    if picked and near:
        values = "; ".join(f"{FLAGS[k]} " + ", ".join(sorted(
            {str(getattr(c, k)) for c in near if getattr(c, k) is not None},
            key=lambda s: (len(s), s)) or ["(none: the default)"]) for k in picked)
        asked = " ".join(f"{FLAGS[k]} {v}" for k, v in picked.items())
        auto = ("; a series is named by the --layout it was run with: one run with --layout "
                "auto is shown by `dlperf results` with the layout its framework applied "
                "(NCHW or NHWC), and is predicted with --layout auto"
                if picked.get("layout") not in (None, "auto")
                and any(c.layout == "auto" for c in near) else "")
        raise ConfigError(f"no stored series of {_describe(model, core)} has {asked}; "
                          f"stored: {values}{auto}")
    missing = [FLAGS[k] for k, v in core.items() if v is None]
    if not missing:
        return Config(model, str(core["framework"]), str(core["mode"]),
                      str(core["precision"]), str(core["device"]), **wanted)
    of_model = [c for c in stored if c.model == model]
    with_ = ", ".join(f"{k}={v}" for k, v in core.items() if v)
    if not of_model:  # other models' configurations would not help: say how to measure it
        raise ConfigError(
            f"no stored points of {model} in {_files(recs)}: measure it first\n"
            f"  dlperf run --model {model} --framework F --precision P -b N --db FILE\n"
            f"and predict from that file, or give {'/'.join(missing)} too for an analytic "
            "prediction from other models' fits (`dlperf results --db FILE` lists what is stored)")
    known = [c.label() for c in of_model]
    raise ConfigError(f"no stored one-device point of {model}"
                      + (f" with {with_}" if with_ else "")
                      + f"; give {'/'.join(missing)} too for an analytic prediction, or pick "
                      f"one of {model}'s stored configurations: "
                      + _listed(known, "; ", " ... ({all} in all)"))


def _batch(value: Any, batch_size: int) -> int:
    s = str(value).strip()
    if s.lower().endswith("x"):
        try:
            factor = float(s[:-1])
        except ValueError:
            raise ConfigError(f"--what-if batch-size={s}: {s[:-1]!r} is not a number; give a "
                              "factor such as 2x or 0.5x, or a batch such as 256") from None
        if not math.isfinite(factor) or factor <= 0:
            raise ConfigError(f"--what-if batch-size={s}: the factor must be a positive finite "
                              "number, e.g. 2x or 0.5x")
        exact = batch_size * factor
        b = round(exact)
        if b < 1 or abs(exact - b) > 1e-9 * exact:
            raise ConfigError(f"--what-if batch-size={s}: {factor:g} x {batch_size} = {exact:g} "
                              "is not a whole batch of at least 1 sample; give a factor that "
                              f"makes one, or the batch itself, e.g. batch-size={max(b, 1)}")
        return _within_batch_limit(b, s)
    try:
        b = int(s)
    except ValueError:
        raise ConfigError(f"--what-if batch-size={s}: give a whole batch (e.g. 256) or a "
                          "factor of this batch (e.g. 2x, 0.5x)") from None
    if b < 1:
        raise ConfigError(f"--what-if batch-size={s}: the batch must be at least 1 sample")
    return _within_batch_limit(b, s)


def _within_batch_limit(b: int, given: str) -> int:
    """``b``, refused over :data:`dlperf.config.limits.MAX_BATCH` (a what-if of 10^23
    samples printed a prediction of 10^22 ms)."""
    from dlperf.config.limits import MAX_BATCH, over

    msg = over(b, MAX_BATCH, "samples per iteration")
    if msg:
        raise ConfigError(f"--what-if batch-size={given}: {msg}")
    return b


#: The host-speed probes (``env.host_speed``'s ``python_loop_ns``) a host-speed what-if
#: accepts, in ns: the probes stored with the committed results span 58.8 ns (cpu-dev, an AMD
#: EPYC host) to 202.8 ns (an H200 VM under load); the range is about a tenth of the fastest
#: to ten times the slowest. Outside it the scaled host time ``H N / probe`` is no machine's.
HOST_SPEED_NS_RANGE = (5.0, 2000.0)


def _host_speed(value: Any) -> float:
    """``--what-if host_speed_ns=N``'s N (ns per iteration of the host-speed probe's loop).

    Raises:
        ConfigError: not a positive finite number, or outside :data:`HOST_SPEED_NS_RANGE`.
    """
    try:
        ns = float(str(value).strip())
    except ValueError:
        ns = float("nan")
    if not math.isfinite(ns) or ns <= 0:
        raise ConfigError(f"--what-if host_speed_ns={value}: give the other host's host-speed "
                          "probe, a positive number of ns per Python loop iteration (e.g. 90; "
                          "`dlperf env` prints this host's)")
    low, high = HOST_SPEED_NS_RANGE
    if not low <= ns <= high:
        raise ConfigError(f"--what-if host_speed_ns={value}: {ns:g} ns per Python loop iteration "
                          f"is no host's: give {low:g} to {high:g} ns (the stored hosts' probes "
                          "span 59-203 ns; the range is a tenth of the fastest to ten times "
                          "the slowest; `dlperf env` prints this host's)")
    return ns


def _name(key: str, value: Any, batch_size: int) -> dict[str, Any]:
    s = str(value).strip()
    if not s:
        raise ConfigError(f"--what-if {key}=: give a {key}")
    return {key: s}


#: What a what-if may change: its key (``-`` read as ``_``) -> the parser of its value,
#: ``(key, value, global batch) -> {field: parsed value}``.
WHAT_IF: dict[str, Callable[[str, Any, int], dict[str, Any]]] = {
    "precision": _name, "mode": _name, "framework": _name,
    "batch_size": lambda key, v, batch_size: {key: _batch(v, batch_size)},
    "host_speed_ns": lambda key, v, batch_size: {key: _host_speed(v)}}


def apply_what_if(what_if: Mapping[str, Any], cfg: Config, batch_size: int
                  ) -> tuple[Config, int, float | None]:
    """The configuration, global batch and host-speed probe a what-if asks for.

    Args:
        what_if: ``{"precision": "bf16"}``, ``{"mode": "graph"}``, ``{"framework": "jax"}``,
            ``{"batch_size": "2x" | "0.5x" | 256}``, ``{"host_speed_ns": 90}`` (``-`` or ``_``
            in the keys; :data:`WHAT_IF`); empty: no change.
        cfg: the measured configuration the what-if starts from.
        batch_size: its global batch (samples).

    Returns:
        ``(target config, global batch, host probe in ns or None)``.

    Raises:
        ConfigError: an unknown key; a batch that is not a whole number >= 1 (a factor: not a
            positive finite number, or one that gives no whole batch); a host probe that is not
            a positive finite number; an empty name.
    """
    asked: dict[str, Any] = {}
    for k, v in what_if.items():
        key = str(k).strip().replace("-", "_")
        if key not in WHAT_IF:
            raise ConfigError(f"what-if {k!r}: give precision=, mode=, framework=, "
                              "batch-size=N or Nx, or host_speed_ns=")
        asked.update(WHAT_IF[key](key, v, batch_size))
    b, host = asked.pop("batch_size", batch_size), asked.pop("host_speed_ns", None)
    return cfg.with_(**asked), b, host


def implied_mode(what_if: Mapping[str, Any], base: Config, target: Config
                 ) -> tuple[Config, str | None]:
    """What a what-if implies but does not say: the target framework's default mode (the
    first of its registry entry's ``modes``) for a framework what-if without a mode where the
    base's mode is not one of the target framework's modes, and the default compile mode for
    a target whose mode takes none; with the note that says so (None where nothing was
    implied).

    ``--what-if framework=jax`` from torch eager predicts jax xla (JAX has no eager mode), as
    ``--what-if framework=jax mode=xla`` does; from torch graph the same. A mode given in the
    what-if, a framework not in the registry, or a base mode the target framework has, leave
    the mode as it is (:func:`check_target` then judges it). A base's compile mode (torch
    graph ``reduce-overhead``) is kept only where the target's mode takes one (the registry's
    ``compile_modes``, torch's ``graph``): jax xla or torch eager runs at ``default``, as
    every stored point of such a mode does (``dlperf run`` refuses another).
    """
    keys = {str(k).strip().replace("-", "_") for k in what_if}
    info = framework_info(target.framework)
    notes = []
    if ("framework" in keys and "mode" not in keys and target.framework != base.framework
            and info is not None and info.modes and target.mode not in info.modes):
        mode = info.modes[0]
        notes.append(f"--what-if framework={target.framework}: {info.title or target.framework}"
                     f" has no mode {target.mode!r} (its modes: {', '.join(info.modes)}), so "
                     f"its default mode {mode!r} is predicted (give --what-if mode=... for "
                     "another)")
        target = target.with_(mode=mode)
    if (target.compile_mode != "default" and info is not None
            and target.mode not in info.compile_modes):
        notes.append(f"{target.framework}/{target.mode} takes no compile mode, so the base's "
                     f"compile mode {target.compile_mode!r} is not carried over: its default "
                     "is predicted")
        target = target.with_(compile_mode="default")
    return target, "; ".join(notes) or None


def extrapolation(recs: Records, cfg: Config, batch: int) -> list[str]:
    """The warning for predicting ``cfg`` at ``batch`` samples per device from its measured
    series when that batch is :data:`EXTRAPOLATION_FACTOR` times the largest measured one or
    more, or the smallest over it or less (the back-test's ``extrapolate 2x`` bounds); ``[]`` otherwise, or when ``cfg`` has no measured series.
    Above the series it adds that the batch may not fit where device memory is not judged
    (:func:`dlperf.perfmodel.memory.fit` None: no stored reserved peak, or a framework that
    reserves a pool up front); where it is judged, a batch that does not fit was refused
    before (:func:`dlperf.perfmodel.memory.check`)."""
    pts = [p for p in recs.points if cfg.matches(p)]
    bs = sorted({p.per_device_batch for p in pts if not p.instrumented})
    if not bs:
        return []
    lo, hi = bs[0], bs[-1]
    mem = ""
    if batch >= EXTRAPOLATION_FACTOR * hi:
        where = (f"{batch / hi:.3g}x the largest batch measured in any results file, {hi} "
                 f"(warned from "
                 f"{EXTRAPOLATION_FACTOR:g}x, where the back-test's 'extrapolate 2x' starts)")
        if memory.fit(pts) is None:
            mem = ("; device memory is not judged for it (no stored reserved peak, or an "
                   "allocator that reserves a pool up front), so this batch may not fit on "
                   "the device")
    elif batch * EXTRAPOLATION_FACTOR <= lo:
        where = (f"1/{lo / batch:.3g} of the smallest batch measured in any results file, "
                 f"{lo} (warned from "
                 f"1/{EXTRAPOLATION_FACTOR:g})")
    else:
        return []
    measured = (f"measured batch {lo} of {cfg.label()}" if lo == hi
                else f"measured batches {lo}..{hi} of {cfg.label()} ({len(bs)} sizes)")
    return [f"batch {batch} per device is {where}: the prediction extrapolates from the "
            f"{measured}{mem}"]


def check_divisible(global_batch: int, world: int) -> None:
    """Refuse a global batch that ``world`` devices cannot split evenly.

    Raises:
        ConfigError: ``global_batch`` is not a multiple of ``world``: names the nearest
            multiples.
    """
    if global_batch % world:
        lo = global_batch // world * world
        near = " or ".join(str(b) for b in (lo, lo + world) if b > 0)
        raise ConfigError(f"global batch {global_batch} is not divisible by {world} devices "
                          "(--batch-size/-b is the global batch, split over all devices): "
                          f"give a multiple of {world}, such as {near}")


#: The most GPUs one node holds (``--nproc``): 8 on a DGX/HGX H100 or H200, 16 on the
#: largest boards sold (HGX-2); more devices are more nodes (``--nnodes``, ``--network``).
MAX_GPUS_PER_NODE = 16


def check_scale_out(recs: Records, target: Config, world: int, nnodes: int) -> None:
    """Refuse a data-parallel prediction of a device with no stored data-parallel run: the
    DDP overhead, the all-reduce and the interval all come from such runs (a CPU-only file
    would otherwise get a GPU's NVLink defaults and the 2-GPU interval); and more GPUs on one
    node than a node holds (:data:`MAX_GPUS_PER_NODE`), naming the ``--nnodes`` that gives
    as many.

    Raises:
        ConfigError: either refusal, with how to fix it.
    """
    nproc = world // nnodes
    if special.dp_defaults_apply(target.device) and nproc > MAX_GPUS_PER_NODE:
        # 8 GPUs per node (a DGX) where they divide the devices, else the most that do
        per = next(g for g in (8, *range(MAX_GPUS_PER_NODE, 0, -1)) if world % g == 0)
        raise ConfigError(
            f"--nproc {nproc}: one node holds at most {MAX_GPUS_PER_NODE} GPUs (8 on a DGX "
            f"H200); for {world} GPUs give GPUs per node and nodes, e.g.\n  --nproc {per} "
            f"--nnodes {world // per} --network ib_ndr")
    if world == 1 or special.dp_defaults_apply(target.device):
        return
    stored = {p.world_size for p in recs.points if p.device == target.device and p.world_size > 1
              and p.nnodes == 1}
    if nnodes > 1 or not stored:
        raise ConfigError(
            f"{target.label()} on {world} {target.device} devices"
            + (f" over {nnodes} nodes" if nnodes > 1 else "") + ": the model has no "
            f"data-parallel measurement of device {target.device} to calibrate or judge it"
            + (" across nodes" if nnodes > 1 and stored else "") + "; measure one (dlperf run "
            f"--device {target.device} --nproc 2 ...) or predict one device")


@dataclass(frozen=True)
class Request:
    """A prediction's arguments, checked and resolved against the stored results
    (:func:`dlperf.perfmodel.api._request`): the stored configuration it starts from
    (``base``), the one predicted (``target``, another for a what-if), the global and
    per-device batch, the devices, the network, another host's speed probe (ns) and the
    stored measurements of the point itself, withheld from every fit (``withheld``: one
    device, the configuration at this batch; N devices, its N-device measurements)."""

    base: Config
    target: Config
    global_batch: int
    batch: int
    world: int
    nnodes: int
    network: comm.Network | None
    host_ns: float | None
    batch_what_if: bool
    withheld: tuple[Point, ...]
    note: str | None
    target_note: str | None = None  # a mode the what-if implied (implied_mode)
    changes: tuple[str, ...] = ()  # what the what-if changes (whatifs.whatif_changes)
    gpu: str | None = None  # the GPU model selected among several loaded (gpu_of)
    target_stored: bool = False  # a what-if's target stored at another batch (api.stored_target)

    @property
    def from_base(self) -> bool:
        """A what-if predicted from its base's series (:func:`dlperf.perfmodel.model.what_if`):
        the target differs from the base and is not stored at another batch on one device
        (:func:`dlperf.perfmodel.api.stored_target`); every stored point of the target is
        withheld."""
        return self.target != self.base and not self.target_stored

    @property
    def withheld_files(self) -> list[str]:
        """The results files of the stored one-device measurements of the point, in load
        order (none on N devices, whose withheld points are N-device ones)."""
        return [p.source for p in self.withheld] if self.world == 1 else []

    @property
    def sources(self) -> list[str | None]:
        """Where a what-if's base series is looked for: the results file of the last loaded
        stored measurement of the target (its host session: the what-if back-test pairs two
        configurations within one file), then the best-measured one
        (:meth:`Calibration.fit`)."""
        return [*self.withheld_files[-1:], None]
