"""``hf:`` models: Hugging Face transformers built from a config, with random weights.

``hf:TYPE`` takes the library's own config class defaults for model type ``TYPE`` (the keys
of ``transformers.CONFIG_MAPPING``: ``gpt2``, ``llama``, ``bert``, ``t5``, ``vit``, ...);
``hf:PATH`` reads a local ``config.json`` (a file, or a folder holding one; its
``model_type`` names the config class and its ``architectures`` the head). Nothing is ever
downloaded: no ``from_pretrained``, only ``from_config``, so the weights are the library's
random initialisation.

Options (``hf:llama?layers=4&hidden=512``):

* size aliases, set on the config: ``layers`` (``num_hidden_layers``), ``hidden``
  (``hidden_size``), ``heads`` (``num_attention_heads``), ``kv_heads``
  (``num_key_value_heads``), ``ffn`` (``intermediate_size``), ``vocab`` (``vocab_size``),
  ``positions`` (``max_position_embeddings``), ``classes`` (``num_labels``); an alias or key
  the config class does not have is refused (GPT-2's FFN width is ``n_inner``, not
  ``intermediate_size``), never silently ignored;
* any other attribute of the config class by its own name (``n_inner=256``,
  ``hidden_act=gelu``, ``attention_dropout=0.1``);
* dlperf's own: ``seq`` (tokens per sample; default ``min(max_position_embeddings, 1024)``,
  1024 where the config has no such limit), ``image`` (input height = width; default the
  config's ``image_size``, else 224), ``task`` (which head, below), ``attn`` (the
  ``attn_implementation``: ``eager``, ``sdpa``, ...; default the library's choice).

Tasks (``task=``; default: ``seq2seq-lm`` for an encoder-decoder config, else the first of
``masked-lm``, ``causal-lm``, ``image-classification`` that the type has, so ``hf:bert`` is
BERT's masked LM; ``hf:bert?task=causal-lm&is_decoder=true`` its causal LM head):

==========================  =================  ================  ==========================
task                        Auto class         input             loss (dlperf contract)
==========================  =================  ================  ==========================
``causal-lm``               ForCausalLM        tokens ``[T]``    CE over every position
``masked-lm``               ForMaskedLM        tokens ``[T]``    CE over every position
``seq2seq-lm``              ForSeq2SeqLM       token pairs       CE over the target tokens
``image-classification``    ForImage...        image ``[C,H,W]`` CE over ``num_labels``
==========================  =================  ================  ==========================

dlperf computes the loss itself from the logits (zoo/spec.py contract), not through the
model's ``labels`` argument: synthetic targets are random, so the shift of a causal LM's
labels changes nothing measured; a masked LM is scored on every position (the zoo's
``bert_base`` gathers 15 % of them before its head). ``use_cache`` is off (training).
Token ids of the config (bos/eos/pad/decoder start) that a smaller ``vocab`` leaves out of
range are set to ``vocab - 1`` and listed in ``hyper["clipped_token_ids"]``.

Optimizer: AdamW, lr 5e-5, betas (0.9, 0.999), eps 1e-8, no weight decay: the defaults of
``transformers.TrainingArguments``.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Any, Final

from dlperf.errors import ConfigError, UnavailableError
from dlperf.zoo.spec import OptimizerSpec

FAMILY: Final = "sources.hf"  # Final: typed as its Literal (a spec.Family)

#: task -> (transformers' mapping of model type -> class name, Auto class).
TASKS: dict[str, tuple[str, str]] = {
    "causal-lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    "masked-lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM"),
    "seq2seq-lm": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
    "image-classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                             "AutoModelForImageClassification"),
}
#: An encoder such as BERT also has a causal-LM class (``BertLMHeadModel``, meant for
#: ``is_decoder=True``): its masked LM comes first.
_DEFAULT_ORDER = ("masked-lm", "causal-lm", "image-classification")

#: Option alias -> the config attribute it sets (transformers' standard attribute names;
#: config classes map them to their own, e.g. GPT-2's ``n_layer``, via ``attribute_map``).
ALIASES: dict[str, str] = {
    "layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
    "positions": "max_position_embeddings", "classes": "num_labels",
}
#: dlperf's own options (not config attributes).
OWN_OPTIONS = ("seq", "image", "task", "attn")
DEFAULT_SEQ = 1024
DEFAULT_IMAGE = 224
_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
              "sep_token_id", "cls_token_id", "mask_token_id", "unk_token_id")

#: ``transformers.TrainingArguments`` defaults (learning_rate 5e-5, adam_beta1/2, adam_epsilon,
#: weight_decay 0).
OPTIMIZER = OptimizerSpec(name="adamw", lr=5e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def transformers_module() -> Any:
    """The imported ``transformers``; raises UnavailableError saying how to install it."""
    try:
        import transformers
    except ImportError:
        from dlperf.install import install_hint

        raise UnavailableError("hf: models need Hugging Face transformers, which is not "
                               f"installed; {install_hint('hf')}") from None
    return transformers


def _mapping(task: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, TASKS[task][0])


def _types_with_a_task() -> set[str]:
    return {t for task in TASKS for t in _mapping(task)}


def base_config(base: str, name: str) -> tuple[Any, str | None, tuple[str, ...]]:
    """The config before options, of a model type or a local config.json (``base``).

    Returns ``(config, config.json path or None, architectures named in the file)``.

    Raises:
        ConfigError: an unknown type (naming close ones), a missing or unreadable file, or
            a file without a known ``model_type``.
    """
    hft = transformers_module()
    path = Path(base).expanduser()
    if base.endswith(".json") or "/" in base or path.exists():
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"model {name!r}: no config file {str(file.resolve())!r}; give "
                              "hf:TYPE (e.g. hf:gpt2) or the path of a local config.json")
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"model {name!r}: cannot read {str(file)!r} as JSON: {e}") from None
        mt = data.get("model_type") if isinstance(data, dict) else None
        if mt not in hft.CONFIG_MAPPING:
            raise ConfigError(f"model {name!r}: {str(file)!r} has no known \"model_type\" "
                              f"(got {mt!r}); a transformers config.json names it, e.g. "
                              "\"model_type\": \"llama\"")
        config = hft.CONFIG_MAPPING[mt].from_dict(data)
        return config, str(file.resolve()), tuple(data.get("architectures") or ())
    if base not in _types_with_a_task():
        known = sorted(_types_with_a_task())
        close = difflib.get_close_matches(base, known, n=6, cutoff=0.6)
        hint = f"; close: {', '.join(close)}" if close else ""
        extra = (" (transformers knows it, but dlperf builds only these heads: "
                 f"{', '.join(TASKS)})" if base in hft.CONFIG_MAPPING else "")
        raise ConfigError(f"unknown Hugging Face model type {base!r} in {name!r}{extra}{hint}; "
                          f"{len(known)} types have a head dlperf builds (transformers "
                          f"{hft.__version__}: transformers.CONFIG_MAPPING), or give the path "
                          "of a local config.json")
    return hft.CONFIG_MAPPING[base](), None, ()


def task_of(config: Any, options: dict[str, Any], architectures: tuple[str, ...],
          name: str) -> str:
    """The head (a key of :data:`TASKS`): ``task=`` if given (checked against the type's
    heads), else the head of the file's ``architectures``, else the default order (module
    docstring). Raises ConfigError for a head the type lacks."""
    mt = config.model_type
    have = [t for t in TASKS if mt in _mapping(t)]
    if "task" in options:
        task = str(options["task"])
        if task not in have:
            raise ConfigError(f"model {name!r}: task {task!r} is not one of {mt}'s "
                              f"({', '.join(have) or 'none'}; dlperf builds {', '.join(TASKS)})")
        return task
    for arch in architectures:  # a config.json says which head it was saved with
        for t in have:
            v = _mapping(t)[mt]
            if arch in (v if isinstance(v, (list, tuple)) else (v,)):
                return t
    if getattr(config, "is_encoder_decoder", False) and "seq2seq-lm" in have:
        return "seq2seq-lm"
    for t in _DEFAULT_ORDER:
        if t in have:
            return t
    raise ConfigError(f"model {name!r}: {mt} has none of the heads dlperf builds "
                      f"({', '.join(TASKS)})")


#: The largest whole number an option may set (2^31 - 1: every size of a config is an int32
#: somewhere in the frameworks).
MAX_OPTION_INT = 2**31 - 1
#: The most layers a model may have (the deepest published transformers have about 100).
MAX_LAYERS = 4096
#: The most parameters an ``hf:`` model may have by the estimate of :func:`check_sizes`
#: (10^13: ten times the largest published models).
MAX_PARAMS = 1e13


def apply_options(config: Any, options: dict[str, Any], name: str) -> None:
    """Set the config options (aliases and attributes) on ``config``; refuse unknown ones.

    Raises:
        ConfigError: an option that is not a data attribute of the config (a name starting
            with ``_``, a method, ``__class__=x``), a value of another type than the
            attribute's default, or a whole number outside ``0..2^31-1`` (or below the
            default where that is negative).
    """
    for key, value in options.items():
        if key in OWN_OPTIONS:
            continue
        attr = ALIASES.get(key, key)
        if not attr.isidentifier() or attr.startswith("_") or callable(
                getattr(type(config), attr, None)):
            raise ConfigError(f"model {name!r}: option {key!r} is not a setting of the "
                              f"config; options are {', '.join(sorted(ALIASES))}, "
                              f"{', '.join(OWN_OPTIONS)}, or a data attribute of "
                              f"{type(config).__name__} (not a method or a name starting "
                              "with _)")
        if attr != "num_labels" and not hasattr(config, attr):
            cls = type(config).__name__
            raise ConfigError(
                f"model {name!r}: {cls} has no attribute {attr!r}"
                + (f" (option {key!r})" if attr != key else "")
                + f"; options: {', '.join(sorted(ALIASES))} (where the config has them), "
                f"{', '.join(OWN_OPTIONS)}, or any attribute of {cls}"
                f"{_close_attrs(config, attr)}")
        old = getattr(config, attr, None)
        if isinstance(old, bool) and not isinstance(value, bool) or \
                isinstance(old, int) and not isinstance(old, bool) and not isinstance(value, int):
            raise ConfigError(f"model {name!r}: {key}={value!r}: {attr} takes "
                              f"{type(old).__name__} values (default {old!r})")
        if isinstance(value, int) and not isinstance(value, bool):
            low = min(0, old) if isinstance(old, int) and not isinstance(old, bool) else 0
            if not low <= value <= MAX_OPTION_INT:
                raise ConfigError(f"model {name!r}: {key}={value}: give a whole number from "
                                  f"{low} to {MAX_OPTION_INT:,} (the limit of a config size)")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"model {name!r}: {key}={value}: give a finite number")
        try:
            setattr(config, attr, value)
        except Exception as e:  # noqa: BLE001 - the config class refuses the value
            raise ConfigError(f"model {name!r}: {key}={value!r}: the config refused it "
                              f"({type(e).__name__}: {str(e)[:200]})") from None


def check_sizes(config: Any, name: str) -> int:
    """The parameters of the model a config describes, estimated before it is built, and
    refused when over the limits: at most :data:`MAX_LAYERS` layers and :data:`MAX_PARAMS`
    parameters. The estimate is Kaplan et al. (2020, "Scaling Laws for Neural Language
    Models", table 1): per layer 4 h^2 (attention) + 2 h f (the MLP, ``f`` the intermediate
    size, default 4 h), plus the embeddings v h + p h; encoder-decoder layers counted on both
    sides. Building even on the meta device costs memory and time per layer, so an absurd
    size (``layers=10^23``) is refused here, with the limit, before anything is built.

    Raises:
        ConfigError: naming the size, the estimate and the limit.
    """
    def get(*attrs: str) -> int:
        for a in attrs:
            v = getattr(config, a, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return 0

    layers = get("num_hidden_layers", "n_layer", "num_layers") + get("decoder_layers",
                                                                      "num_decoder_layers")
    if layers > MAX_LAYERS:
        raise ConfigError(f"model {name!r}: {layers:,} layers is over dlperf's limit of "
                          f"{MAX_LAYERS:,} layers (the deepest published transformers have "
                          "about 100); give fewer layers")
    h = get("hidden_size", "n_embd", "d_model")
    f = get("intermediate_size", "n_inner", "ffn_dim", "d_ff") or 4 * h
    v, p = get("vocab_size"), get("max_position_embeddings", "n_positions")
    params = layers * (4 * h * h + 2 * h * f) + (v + p) * h
    if params > MAX_PARAMS:
        raise ConfigError(f"model {name!r}: about {params:.3g} parameters ({layers} layers of "
                          f"hidden size {h:,}, vocabulary {v:,}) is over dlperf's limit of "
                          f"{MAX_PARAMS:.0e} (Kaplan et al. 2020's estimate); give smaller "
                          "sizes")
    return params


def _close_attrs(config: Any, attr: str) -> str:
    close = difflib.get_close_matches(attr, list(config.to_dict()), n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def clip_token_ids(config: Any) -> dict[str, int]:
    """Set token ids beyond ``vocab_size`` to ``vocab_size - 1``; returns the old values."""
    vocab = getattr(config, "vocab_size", None)
    clipped = {}
    for k in _TOKEN_IDS:
        v = getattr(config, k, None)
        if isinstance(vocab, int) and isinstance(v, int) and v >= vocab:
            setattr(config, k, vocab - 1)
            clipped[k] = v
    return clipped


def make_config(hyper: dict[str, Any]) -> Any:
    """The transformers config of an ``hf:`` spec's ``hyper`` (built again in each process
    from the type or file and the options, never stored as an object)."""
    name = hyper["name"]
    config, _, _ = base_config(hyper["config_path"] or hyper["model_type"], name)
    apply_options(config, hyper["options"], name)
    clip_token_ids(config)
    input_of(config, hyper["task"], hyper["options"], name)  # sets image_size where given
    config.use_cache = False
    return config


def input_of(config: Any, task: str, options: dict[str, Any], name: str
             ) -> tuple[str, tuple[int, ...], int]:
    """``(input_kind, input_shape, num_classes)`` of the task, from ``seq`` / ``image`` and
    the config (``image`` also sets the config's ``image_size`` where it has one).

    Raises:
        ConfigError: ``seq`` outside ``1..max_position_embeddings``.
    """
    if task == "image-classification":
        size = int(options.get("image", getattr(config, "image_size", DEFAULT_IMAGE)))
        if "image" in options and hasattr(config, "image_size"):
            config.image_size = size
        return "image", (int(getattr(config, "num_channels", 3)), size, size), config.num_labels
    limit = getattr(config, "max_position_embeddings", None)
    seq = int(options.get("seq", min(limit, DEFAULT_SEQ) if isinstance(limit, int)
                          else DEFAULT_SEQ))
    if seq < 1 or (isinstance(limit, int) and seq > limit):
        raise ConfigError(f"model {name!r}: seq={seq} must be in 1..{limit} "
                          "(max_position_embeddings; raise it with positions=N)")
    vocab = int(config.vocab_size)
    if task == "seq2seq-lm":
        return "token_pairs", (2, seq), vocab
    return "tokens", (seq,), vocab
