"""``hf:`` names to specs: the config (:mod:`dlperf.zoo.sources.hf.spec`) and the counts of
the model built on the meta device (:mod:`dlperf.zoo.sources.hf.torch_impl`)."""

from __future__ import annotations

import json

from dlperf.errors import ConfigError, UnavailableError
from dlperf.zoo.sources.hf.spec import (
    FAMILY,
    OPTIMIZER,
    TASKS,
    apply_options,
    base_config,
    check_sizes,
    clip_token_ids,
    input_of,
    task_of,
    transformers_module,
)
from dlperf.zoo.sources.names import join_options, split_options
from dlperf.zoo.spec import ModelSpec, code_fingerprint


def resolve(body: str, name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``hf:<body>`` (``name`` is the whole name, for messages).

    Parameters come from the model built on the meta device, forward FLOPs from
    ``FlopCounterMode`` on fake tensors (:mod:`dlperf.zoo.sources.torch_count`).

    Raises:
        ConfigError: an unknown model type (with close types), a config file that is missing
            or not a transformers config, an unknown option or attribute, a bad value.
        UnavailableError: transformers or torch is not installed.
    """
    base, options = split_options(name, body)
    config, path, archs = base_config(base, name)
    if "attn" in options and not isinstance(options["attn"], str):
        raise ConfigError(f"model {name!r}: attn={options['attn']!r} is not an attention "
                          "implementation (eager, sdpa, flash_attention_2, ...)")
    apply_options(config, options, name)
    check_sizes(config, name)  # before anything is built, even on the meta device
    clipped = clip_token_ids(config)
    task = task_of(config, options, archs, name)
    kind, shape, classes = input_of(config, task, options, name)
    canonical = "hf:" + join_options(path or base, options)
    hyper = {"source": "hf", "name": canonical, "model_type": config.model_type,
             "config_path": path, "options": dict(options), "task": task,
             "auto_class": TASKS[task][1], "clipped_token_ids": clipped,
             "dropout": float(getattr(config, "hidden_dropout_prob", 0.0) or 0.0)}
    try:
        from dlperf.zoo.sources.hf.torch_impl import count
    except ImportError as e:
        from dlperf.install import install_hint

        raise UnavailableError(f"hf: models are PyTorch models and torch does not import: "
                               f"{e}; {install_hint('torch', 'torch-cuda')}") from None
    counts = count(hyper, kind, shape)
    hyper.update(model_class=counts["model_class"], attn_implementation=counts["attn"],
                 transformers=transformers_module().__version__)
    origin = (f"config file {path}" if path
              else f"the {config.model_type} config class defaults")
    with_options = f" with {join_options('', options).lstrip('?')}" if options else ""
    return ModelSpec(
        name=canonical, family=FAMILY, input_kind=kind,  # type: ignore[arg-type]
        input_shape=shape, num_classes=classes, params=counts["params"],
        forward_flops_per_sample=counts["forward_flops"],
        source=(f"Hugging Face transformers {hyper['transformers']} {counts['model_class']} "
                f"from {origin}{with_options}; random weights (from_config, never "
                "downloaded)"),
        flops_source=counts["flops_source"], optimizer=OPTIMIZER, hyper=hyper,
        code=code_fingerprint(json.dumps(config.to_dict(), sort_keys=True, default=str),
                              hyper["transformers"]))
