"""``timm:`` names to specs: the options (:mod:`dlperf.zoo.sources.timm.spec`) and the counts
of the model built on the meta device (:mod:`dlperf.zoo.sources.timm.torch_impl`)."""

from __future__ import annotations

import difflib

from dlperf.errors import ConfigError
from dlperf.zoo.sources.names import join_options, split_options
from dlperf.zoo.sources.timm.spec import (
    FAMILY,
    OPTIMIZER,
    OWN_OPTIONS,
    check_option_sizes,
    create_kwargs,
    timm_module,
)
from dlperf.zoo.spec import ModelSpec


def resolve(body: str, name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``timm:<body>`` (parameters of the model built on the meta
    device, FLOPs from ``FlopCounterMode``: :mod:`dlperf.zoo.sources.torch_count`).

    Raises:
        ConfigError: an unknown model name (with close ones), an option over its limit
            (:func:`~dlperf.zoo.sources.timm.spec.check_option_sizes`), or options that
            ``create_model`` refuses (its message).
        UnavailableError: timm (or torch) is not installed or does not import.
    """
    base, options = split_options(name, body)
    check_option_sizes(options, name)  # before timm builds anything
    timm = timm_module()
    if not timm.is_model(base):
        close = difflib.get_close_matches(base, timm.list_models(), n=6, cutoff=0.6)
        raise ConfigError(f"unknown timm model {base!r} in {name!r}"
                          f"{'; close: ' + ', '.join(close) if close else ''}; "
                          "timm.list_models() lists them")
    for key in OWN_OPTIONS:
        v = options.get(key)
        if key in options and not (isinstance(v, int) and v > 0):
            raise ConfigError(f"model {name!r}: {key}={options[key]!r} must be a positive "
                              "integer")
    canonical = "timm:" + join_options(base, options)
    hyper = {"source": "timm", "name": canonical, "model": base, "options": dict(options),
             "timm": str(getattr(timm, "__version__", "?"))}
    from dlperf.zoo.sources.timm.torch_impl import count  # timm imported: torch is there

    c = count(hyper)
    return ModelSpec(
        name=canonical, family=FAMILY, input_kind="image", input_shape=c["input_size"],
        num_classes=c["num_classes"], params=c["params"],
        forward_flops_per_sample=c["forward_flops"], source=(
            f"timm {hyper['timm']} create_model({base!r}, pretrained=False"
            f"{''.join(f', {k}={v!r}' for k, v in create_kwargs(options).items())}); "
            "random weights"),
        flops_source=c["flops_source"], optimizer=OPTIMIZER, hyper=hyper)
