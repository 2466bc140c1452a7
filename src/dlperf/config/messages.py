"""Validation error messages, keyed on error locations.

Every error of a run or sweep configuration names where it is (a field, with the CLI flag that
sets it for ``dlperf run``), what is wrong and how to fix it. The location comes from pydantic
(``err["loc"]``: ``("batch_size",)``, ``("iterations", "min_iters")``) or, for a rule over several
fields, from the :class:`FieldRuleError` the rule raised, which names the field it blames; the
message text is never parsed to find it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from dlperf.errors import did_you_mean

#: RunConfig field (the last element of an error location) -> the ``dlperf run`` flag that
#: sets it, for error messages.
CLI_FLAGS = {"min_iters": "--min-iters", "min_time_s": "--min-time", "max_iters": "--max-iters",
             "max_time_s": "--max-time", "warmup_window": "--warmup-window",
             "max_warmup_iters": "--max-warmup-iters", "ci_target_rel": "--ci-target", "max_warmup_time_s": "--max-warmup-time",
             "timeout_s": "--timeout", "batch_size": "--batch-size", "grad_accum": "--grad-accum",
             "threads": "--threads", "cpu_bind": "--cpu-bind", "layout": "--layout", "loader_workers": "--loader-workers",
             "loader_prefetch": "--loader-prefetch", "loader_impl": "--loader-impl",
             "optimizer_impl": "--optimizer-impl",
             "input_bound_share": "--input-bound-share",
             "power_interval_s": "--power-interval", "nproc": "--nproc", "nnodes": "--nnodes",
             "scaling": "--scaling", "dp_layout": "--dp-layout", "bucket_cap_mb": "--bucket-cap-mb",
             "gradient_as_bucket_view": "--gradient-as-bucket-view",
             "static_graph": "--static-graph", "find_unused_parameters": "--find-unused-parameters",
             "broadcast_buffers": "--broadcast-buffers/--no-broadcast-buffers",
             "comm_profile_iters": "--comm-profile-iters", "target_loss": "--target-loss",
             "compile_mode": "--compile-mode", "precision": "--precision", "device": "--device",
             "data": "--data", "breakdown": "--breakdown", "trace_dir": "--trace",
             "timeline": "--timeline", "options": "--framework-option"}


class FieldRuleError(ValueError):
    """A rule over several fields of a configuration failed; ``field`` is the one it blames
    (the error's location), ``str(self)`` the message (what is wrong and how to fix it).

    Raised inside a pydantic validator, it reaches :func:`format_validation` as the error's
    ``ctx["error"]``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by name: a run config's are its axes' (the names it is given by,
    :data:`dlperf.config.axes.SETTINGS`), any other model's its own."""
    from dlperf.config.axes import AXES

    if set(AXES) <= set(model.model_fields):
        return {k: f for a in AXES for k, f in AXES[a].model_fields.items()}
    return dict(model.model_fields)


def by_setting(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """An error location without the axis of a run config it starts with
    (``("workload", "batch_size")`` -> ``("batch_size",)``), as a setting is named in flags
    and sweep files; any other location as it is."""
    from dlperf.config.axes import AXES

    return loc[1:] if len(loc) > 1 and str(loc[0]) in AXES else loc


def setting_of(err: ErrorDetails) -> str | None:
    """The setting a pydantic error of a run config is about (the first element of its
    location by setting, :func:`by_setting`); None for an error of the whole config."""
    loc = by_setting(tuple(err["loc"]))
    return str(loc[0]) if loc else None


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The (sub-)model that holds the last element of ``loc`` (a location by setting):
    ``root`` for ``("colour",)``, IterationPolicy for ``("iterations", "min_iter")``."""
    model = root
    for part in loc[:-1]:
        field = _fields(model).get(str(part))
        sub = getattr(field, "annotation", None) if field is not None else None
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            break
        model = sub
    return model


def unknown_field_message(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``unknown field 'gird'; did you mean 'grid'?``: the suggestion is the closest field of
    the model at that location (a run config's: its settings), else the closest field of one
    of its sub-models, by its path (``min_iter`` at the top of a run config: ``did you mean
    'iterations.min_iters'?``)."""
    loc = by_setting(loc)
    name = str(loc[-1])
    model = _model_at(root, loc)
    fields = _fields(model)
    hint = did_you_mean(name, sorted(fields))
    if not hint:
        nested = {f"{k}.{sub}": sub for k, f in fields.items()
                  if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
                  for sub in f.annotation.model_fields}
        close = did_you_mean(name, sorted(set(nested.values())))
        path = [p for p, leaf in nested.items() if close and f"{leaf!r}?" in close]
        hint = f"; did you mean {path[0]!r}?" if path else ""
    return f"unknown field {name!r}{hint}"


def _location(err: ErrorDetails, flags: bool) -> str:
    """``"batch_size"``, ``"iterations.min_iters"`` or, with ``flags``, ``"--batch-size
    (batch_size)"`` (a run config's settings by name, without their axis); for a rule over
    several fields, the field its :class:`FieldRuleError` blames; ``"config"`` for a
    whole-config error that blames none."""
    loc = by_setting(tuple(err["loc"]))
    rule = (err.get("ctx") or {}).get("error")
    if isinstance(rule, FieldRuleError):
        loc = (*loc, rule.field)
    text = ".".join(str(x) for x in loc) or "config"
    if flags and loc and str(loc[-1]) in CLI_FLAGS:
        text = f"{CLI_FLAGS[str(loc[-1])]} ({text})"
    return text


def _unit(field: str) -> str:
    """The unit of a setting, from its name's suffix: ``_s`` seconds, ``_mb`` MB; else none."""
    if field.endswith("_s"):
        return "seconds"
    if field.endswith("_mb"):
        return "MB"
    return ""


def _amount(value: Any, unit: str) -> str:
    """``2,592,000 seconds (30 days)``: a limit with its unit, and in days or hours when it
    is seconds and at least an hour."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{value} {unit}".strip()
    text = f"{value:,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"
    text = text.removesuffix(".0")
    if unit == "seconds" and value >= 86400:
        text += f" seconds ({value / 86400:g} days)"
    elif unit == "seconds" and value >= 3600:
        text += f" seconds ({value / 3600:g} hours)"
    elif unit:
        text += f" {unit}"
    return text


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def _bound_message(err: ErrorDetails) -> str | None:
    """Pydantic's own phrasing ("Input should be less than or equal to 2592000", "List should
    have at least 1 item after validation") of a bound or length error, said as dlperf says
    it: the value, the limit with its unit (:func:`_unit`) and what to give instead; None for
    another kind of error."""
    kind, ctx, inp = err.get("type"), err.get("ctx") or {}, err.get("input")
    field = str(err["loc"][-1]) if err["loc"] else ""
    unit = _unit(field)
    if kind in ("less_than_equal", "less_than"):
        lim = ctx.get("le", ctx.get("lt"))
        top = "at most" if kind == "less_than_equal" else "less than"
        return f"{_shown(inp)} is over the limit: give {top} {_amount(lim, unit)}"
    if kind in ("greater_than_equal", "greater_than"):
        lim = ctx.get("ge", ctx.get("gt"))
        low = "at least" if kind == "greater_than_equal" else "more than"
        return f"{_shown(inp)} is below the minimum: give {low} {_amount(lim, unit)}"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        entries = "entry" if n == 1 else "entries"
        got = "an empty list" if not inp else f"a list of {len(inp)}"
        example = " (e.g. `grid: [{model: fcn5_tiny}]`)" if field == "grid" else ""
        return f"{got}; give at least {n} {entries}{example}"
    if kind == "too_long":
        n = ctx.get("max_length")
        return f"a list of {len(inp) if inp is not None else '?'}; give at most {n} entries"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return ("empty text; give a name" if not inp else
                f"{inp!r} is too short; give at least {n} characters")
    if kind == "string_too_long":
        return (f"{len(inp) if inp is not None else '?'} characters; give at most "
                f"{ctx.get('max_length')}")
    return None


#: Pydantic's error types of a value that is not a number (or not a whole one), and of a
#: value that is not a bool (:func:`_type_message`).
_NUMBER_TYPES = {"float_parsing": "a number", "float_type": "a number",
                 "int_parsing": "a whole number", "int_type": "a whole number",
                 "int_from_float": "a whole number"}
_BOOL_TYPES = ("bool_parsing", "bool_type")


def _type_message(err: ErrorDetails) -> str | None:
    """Pydantic's phrasing of a value of the wrong kind ("Input should be a valid number,
    unable to parse string as a number", "Input should be a finite number") said as dlperf
    says it: the value and what to give instead, with the setting's unit (:func:`_unit`);
    None for another kind of error."""
    kind, inp = err.get("type"), err.get("input")
    field = str(err["loc"][-1]) if err["loc"] else ""
    unit = _unit(field)
    of = f" of {unit}" if unit else ""
    if kind in _NUMBER_TYPES:
        return f"{inp!r} is not {_NUMBER_TYPES[kind]}: give {_NUMBER_TYPES[kind]}{of}"
    if kind == "finite_number":
        return f"{_shown(inp)} is not a finite number: give a finite number{of}"
    if kind in _BOOL_TYPES:
        return f"{inp!r} is not true or false: give true or false"
    return None


def error_message(err: ErrorDetails, root: type[BaseModel]) -> str:
    """The message of one pydantic error ``err`` raised validating the model ``root``
    (:func:`format_validation` gives it its location): a validator's own text (without
    pydantic's ``Value error,`` prefix), a bound or length error or a value of the wrong kind
    in dlperf's words (:func:`_bound_message`, :func:`_type_message`), the did-you-mean of an
    unknown field, else pydantic's text, followed by ``(got VALUE)`` when the value is not in
    it already."""
    msg = err["msg"]
    ctx = err.get("ctx") or {}
    if isinstance(ctx.get("error"), Exception):
        msg = str(ctx["error"])
    msg = msg.removeprefix("Value error, ")
    worded = _bound_message(err)
    if worded is None and not isinstance(ctx.get("error"), Exception):
        worded = _type_message(err)
    if worded is not None:
        return worded
    if err.get("type") == "extra_forbidden" and err["loc"]:
        msg = unknown_field_message(root, tuple(err["loc"]))
    inp = err.get("input")
    whole = isinstance(inp, (dict, BaseModel)) or isinstance(ctx.get("error"), FieldRuleError)
    return msg + (f" (got {inp!r})" if inp is not None and not whole and repr(inp) not in msg
                  else "")


def format_validation(e: ValidationError, root: type[BaseModel], where: str = "",
                      flags: bool = False) -> str:
    """One message for all errors of ``e``, each as ``{where}{location}: {message}``.

    Args:
        e: pydantic's error, raised validating ``root``.
        root: the model that was validated (for the fields an unknown one is compared with).
        where: prefix of every location (``"grid[2]."`` in a sweep file).
        flags: name the ``dlperf run`` flag of each field (:data:`CLI_FLAGS`).

    Returns:
        ``"loc: message"`` for one error; ``"invalid configuration:"`` and one line each for
        several.
    """
    parts = [f"{where}{_location(err, flags)}: {error_message(err, root)}" for err in e.errors()]
    if len(parts) == 1:
        return parts[0]
    return "invalid configuration:\n  " + "\n  ".join(parts)
