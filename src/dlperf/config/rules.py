"""The rules over several fields of a run config, one function per axis, all framework-free.

What a framework can do comes from its registry entry (:mod:`dlperf.registry`: devices,
precisions, models, breakdown, input pipelines, data-parallel layouts and modes, which
framework-specific options it takes); how its own options combine with the rest of a point is
checked by the framework itself (``frameworks/<name>/options.py``, the entry's ``options``).
Each rule raises a :class:`~dlperf.config.messages.FieldRuleError` naming the field it blames,
what is wrong and how to fix it. :func:`check_run` applies them in order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlperf.config.axes import DDP_FIELDS
from dlperf.config.messages import CLI_FLAGS, FieldRuleError, error_message
from dlperf.errors import unknown_choice
from dlperf.registry import FRAMEWORK_MODES, FRAMEWORKS, FrameworkInfo, framework_info

#: A framework's own option rules: ``check(cfg) -> [(field, message), ...]`` (empty: fine).
OptionRules = Callable[[Any], list[tuple[str, str]]]


def _names(infos: list[tuple[str, FrameworkInfo]]) -> str:
    return " or ".join(i.title or n for n, i in infos)


def check_mode(cfg: Any) -> None:
    """The mode is one of the framework's (registry ``modes``)."""
    rt = cfg.runtime
    modes = FRAMEWORK_MODES[rt.framework]
    if rt.mode not in modes:
        raise FieldRuleError("mode", str(unknown_choice(
            "mode", rt.mode, modes, plural=f"modes of framework {rt.framework!r}")))


def _check_model_framework(model: str, framework: str) -> None:
    """A ``file:`` or entry-point model returns a model of one framework (its spec's
    ``hyper["framework"]``, read when the spec was made); refuse it under another, with
    :func:`dlperf.zoo.sources.custom.contract.check_framework`'s message. The zoo's models,
    which every framework implements, and names that are not models pass."""
    from dlperf.errors import ConfigError
    from dlperf.zoo import get_spec, is_model
    from dlperf.zoo.sources.custom.contract import check_framework

    if not is_model(model):
        return
    try:
        check_framework(get_spec(model).hyper or {}, framework, model)
    except ConfigError as e:
        raise FieldRuleError("framework", str(e)) from None


def check_capabilities(cfg: Any, info: FrameworkInfo) -> None:
    """Device, precision, model, breakdown, input pipeline and data parallelism are among
    what the framework has (registry ``devices``, ``precisions``, ``models``, ``breakdown``,
    ``pipelines``, ``data_parallel``)."""
    fw, hw, model = cfg.runtime.framework, cfg.hardware, cfg.workload.model
    if hw.device not in info.devices:
        note = f" ({info.devices_note})" if info.devices_note else ""
        raise FieldRuleError("device", f"device {hw.device!r} is not available for framework "
                                       f"{fw!r}, which runs on {', '.join(info.devices)} only"
                                       f"{note}; use --device {info.devices[0]}")
    if hw.precision not in info.precisions:
        raise FieldRuleError("precision", f"precision {hw.precision!r} is not implemented for "
                                          f"framework {fw!r}; use --precision "
                                          f"{' or '.join(info.precisions)}")
    _check_model_framework(model, fw)
    if info.models is not None and model.removesuffix("_tiny") not in info.models:
        raise FieldRuleError("model", f"model {model!r} has no {fw} implementation; {fw} "
                                      f"has {', '.join(info.models)} (and their _tiny variants)")
    if not info.breakdown and cfg.traced:
        raise FieldRuleError("breakdown", f"--breakdown, --trace and --timeline are not available for "
                                          f"framework {fw!r} (no profiler split of its step); "
                                          "run without them")
    if not info.pipelines and (cfg.input.loader_workers is not None
                               or str(cfg.input.data).startswith("imagefolder")):
        raise FieldRuleError(
            "loader_workers" if cfg.input.loader_workers is not None else "data",
            f"framework {fw!r} has no input pipeline: --loader-workers and ImageFolder data are "
            "not available; use synthetic data or a data set read into memory (mnist, cifar10, "
            "ptb, wikitext2)")
    if not info.data_parallel and cfg.world_size > 1:
        raise FieldRuleError("nproc", f"data parallelism (nproc x nnodes = {cfg.world_size}) is "
                                      f"not available for framework {fw!r}; use --nproc 1")


def check_trace_dir(cfg: Any) -> None:
    """The trace folder can be made: not empty, not a file, not under a file."""
    trace_dir = cfg.measure.trace_dir
    if trace_dir is None:
        return
    if not trace_dir.strip():
        raise FieldRuleError("trace_dir", "trace_dir is empty; give a folder for the traces, "
                                          "e.g. --trace traces/")
    p = Path(trace_dir).expanduser()
    if p.exists() and not p.is_dir():
        raise FieldRuleError("trace_dir", f"trace_dir {trace_dir!r} is a file; give a folder "
                                          "for the traces (created if missing)")
    # The folder is created after the measurement: a file on its path would only fail then
    # (the point stored without its trace), so it is refused here.
    for anc in p.parents:
        if anc.exists():
            if not anc.is_dir():
                raise FieldRuleError("trace_dir", f"trace_dir {trace_dir!r}: '{anc}' is a "
                                                  "file, so the trace folder cannot be created "
                                                  "there; give a folder path that does not pass "
                                                  "through a file")
            break


def check_data(cfg: Any) -> None:
    """Loader workers need real data."""
    workers = cfg.input.loader_workers
    if workers is not None and cfg.input.data == "synthetic":
        raise FieldRuleError(
            "loader_workers",
            f"loader_workers {workers} needs real data (--data mnist, cifar10, ptb, "
            f"wikitext2, imagefolder:PATH, ...): synthetic data are made on the device and have "
            f"no input pipeline")


def check_foreign_options(cfg: Any, info: FrameworkInfo) -> None:
    """Options that belong to other frameworks stay at their defaults: ``compile_mode`` (the
    registry's ``compile_modes``), ``loader_impl`` (``loader_impls``), ``optimizer_impl``
    (``optimizer_impls``) and the DDP options
    (``ddp``); the refusal names the frameworks that have the option."""
    rt = cfg.runtime
    fw = rt.framework
    if rt.compile_mode != "default" and not info.compile_modes:
        owners = [(n, i) for n, i in FRAMEWORKS.items() if i.compile_modes]
        compilers = " / ".join(dict.fromkeys(i.compiler for _, i in owners))
        needs = " or ".join(f"--framework {n} --mode {m}" for n, i in owners
                            for m in i.compile_modes)
        raise FieldRuleError("compile_mode", f"compile_mode {rt.compile_mode!r} is {compilers}'s "
                                             f"mode: it needs {needs} (got {fw}/{rt.mode}); "
                                             "leave --compile-mode at default for the others")
    if cfg.input.loader_impl not in info.loader_impls:
        owners = [(n, i) for n, i in FRAMEWORKS.items() if len(i.loader_impls) > 1]
        raise FieldRuleError("loader_impl", f"loader_impl {cfg.input.loader_impl!r} is a "
                                            f"{_names(owners)} option: framework {fw!r} always "
                                            f"uses {info.pipeline}; use --loader-impl auto")
    if rt.optimizer_impl not in info.optimizer_impls:
        owners = [(n, i) for n, i in FRAMEWORKS.items() if len(i.optimizer_impls) > 1]
        raise FieldRuleError("optimizer_impl", f"optimizer_impl {rt.optimizer_impl!r} is a "
                                               f"{_names(owners)} option: framework {fw!r} "
                                               f"always uses {info.optimizer}; use "
                                               "--optimizer-impl auto")
    ddp = [k for k in rt.options if k in DDP_FIELDS]
    if not info.ddp and ddp:
        raise FieldRuleError("options", f"DDP options (--bucket-cap-mb, --static-graph, ...; "
                                        f"given: {', '.join(ddp)}) are PyTorch "
                                        f"DistributedDataParallel's; framework {fw!r} has none")


def own_rules(info: FrameworkInfo) -> OptionRules | None:
    """The framework's own option rules (registry ``options``, ``"module:attribute"``,
    imported now), or None."""
    if not info.options:
        return None
    mod, attr = info.options.split(":")
    return getattr(importlib.import_module(mod), attr)


def options_model(info: FrameworkInfo) -> Any:
    """The framework's ``Options`` model (a pydantic model in the module of its registry
    ``options``), or None where it has none."""
    if not info.options:
        return None
    return getattr(importlib.import_module(info.options.split(":")[0]), "Options", None)


def check_own_options(cfg: Any, info: FrameworkInfo) -> None:
    """The framework's own options (``cfg.runtime.options``, checked by its
    :func:`options_model`) and rules (``frameworks/<name>/options.py``); the first error
    raised."""
    model, rt = options_model(info), cfg.runtime
    if rt.options and model is None:
        raise FieldRuleError("options", f"framework {rt.framework!r} takes no options of its "
                                        f"own (got {', '.join(map(str, rt.options))}); leave "
                                        "--framework-option out")
    if model is not None:
        try:
            model.model_validate(rt.options)
        except ValidationError as e:
            def where(loc: tuple[Any, ...]) -> str:
                name = ".".join(map(str, loc))
                flag = CLI_FLAGS.get(name)  # an option with a flag of its own (DDP's)
                return f"{name} ({flag})" if flag else name

            bad = "; ".join(f"{where(x['loc'])}: {error_message(x, model)}" for x in e.errors())
            raise FieldRuleError("options", f"{rt.framework} options: {bad} (its options: "
                                            f"{', '.join(model.model_fields)})") from None
    rules = own_rules(info)
    for field, message in (rules(cfg) if rules is not None else []):
        raise FieldRuleError(field, message)


def check_parallel(cfg: Any, info: FrameworkInfo) -> None:
    """The data-parallel layout is one of the framework's (registry ``dp_layouts``) and, with
    more than one replica, the mode is one its engine supports (``dp_modes``)."""
    if cfg.parallel.dp_layout not in info.dp_layouts:
        raise FieldRuleError("dp_layout", str(unknown_choice(
            "dp_layout", cfg.parallel.dp_layout, info.dp_layouts,
            plural=f"data-parallel layouts of framework {cfg.runtime.framework!r}")))
    if cfg.world_size > 1 and info.dp_modes is not None and cfg.runtime.mode not in info.dp_modes:
        raise FieldRuleError("mode", f"data parallelism (nproc x nnodes > 1) is not available "
                                     f"for {cfg.runtime.framework}/{cfg.runtime.mode}; use mode "
                                     f"{' or '.join(info.dp_modes)}")


def check_batch(cfg: Any) -> None:
    """The global batch splits evenly over the replicas (strong scaling) and the per-device
    batch over the accumulation steps."""
    n, par = cfg.world_size, cfg.parallel
    b, accum = cfg.workload.batch_size, cfg.workload.grad_accum
    if par.scaling == "strong" and b % n:
        raise FieldRuleError(
            "batch_size",
            f"batch_size {b} is not divisible by the {n} devices (nproc {par.nproc} x nnodes "
            f"{par.nnodes}): with strong scaling the global batch is split evenly; give a "
            f"multiple of {n} (e.g. {max(n, b - b % n)}) or use --scaling weak")
    if cfg.per_device_batch % accum:
        raise FieldRuleError(
            "batch_size",
            f"the per-device batch {cfg.per_device_batch} is not divisible by grad_accum "
            f"{accum}; choose a batch size that is a multiple of the accumulation steps"
            + (" times the devices" if n > 1 and par.scaling == "strong" else ""))


def check_run(cfg: Any) -> None:
    """Every rule, in order: mode, the framework's capabilities, trace folder, data, options
    of other frameworks, the framework's own rules, data parallelism, batch.

    A name registered for validation only (in ``FRAMEWORK_MODES``, without a registry entry)
    gets the defaults of a :class:`~dlperf.registry.FrameworkInfo`: no capability limits, no
    options of other frameworks.

    Raises:
        FieldRuleError: the first rule that fails.
    """
    check_mode(cfg)
    fw = cfg.runtime.framework
    info = framework_info(fw) or FrameworkInfo("", FRAMEWORK_MODES[fw])
    check_capabilities(cfg, info)
    check_trace_dir(cfg)
    check_data(cfg)
    check_foreign_options(cfg, info)
    check_own_options(cfg, info)
    check_parallel(cfg, info)
    check_batch(cfg)
