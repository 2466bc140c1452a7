"""The what-ifs the back-test judges and what a what-if changes: the pairs of stored
configurations each what-if category of the back-test is made of (:data:`WHATIFS`, whose rows
:func:`dlperf.validation.backtest.whatif_rows` makes), the category a what-if of
:func:`dlperf.perfmodel.api.predict` takes its interval from (:func:`whatif_category`), the
changes it counts (:func:`whatif_changes`; in words, :func:`changes_words`) and the changes
each category's rows make (:data:`JUDGED_CHANGES`, :data:`JUDGED_STEPS`): a what-if that
makes more, or another direction, borrows its interval
(:data:`dlperf.perfmodel.intervalchoice.NOT_BACKTESTED`).

Pure over :class:`~dlperf.perfmodel.calibrate.Config`: reads no results file.
"""

from __future__ import annotations

from dlperf.perfmodel.calibrate import Config

#: The back-test category of a what-if of two changes: a framework or mode change with a
#: precision change (:func:`whatif_category`; :data:`WHATIFS` makes its rows).
TWO_CHANGES = "what-if two changes"


#: The framework what-ifs the back-test judges in a category of their own, each direction its
#: own path: ``((framework, mode) of the base, (framework, mode) of the target) -> category``
#: (:data:`WHATIFS` builds its pairs from this). Those with >= 8
#: development rows of stored pairs (same model, precision, device, batch, data, layout and
#: compile mode, in one results file) in the committed H200 results; torch graph with a
#: compile mode of its own (5 development pairs with jax) and every TensorFlow or MXNet pair
#: (none stored on a GPU) are not back-tested.
FRAMEWORK_WHATIFS = {(("torch", "eager"), ("jax", "xla")): "what-if torch->jax",
                     (("jax", "xla"), ("torch", "eager")): "what-if jax->torch",
                     (("torch", "graph"), ("jax", "xla")): "what-if torch graph->jax",
                     (("jax", "xla"), ("torch", "graph")): "what-if jax->torch graph"}


#: The configuration changes the what-if back-test judges at the same batch:
#: ``(category, {field: (from, to)})`` (and ``what-if B->2B``: the same configuration at twice
#: the batch). The framework what-ifs are :data:`FRAMEWORK_WHATIFS`, each
#: direction a category of its own: ``what-if torch->jax`` is PyTorch eager to JAX's only
#: mode, XLA (what ``--what-if framework=jax`` predicts from torch eager), ``what-if
#: jax->torch`` the reverse, ``what-if torch graph->jax`` and ``what-if jax->torch graph``
#: the same with torch.compile (default compile mode). ``what-if two changes``: eager ->
#: graph or one of those framework changes, with fp32 -> bf16 or bf16 -> fp32 (what
#: ``--what-if mode=graph --what-if precision=fp32`` predicts from eager bf16); the target is
#: withheld, the configurations in between are not.
_MODE_WHATIFS = (("what-if eager->graph", {"mode": ("eager", "graph")}),
                 *((cat, {"framework": (src[0], dst[0]), "mode": (src[1], dst[1])})
                   for (src, dst), cat in FRAMEWORK_WHATIFS.items()))
WHATIFS = (("what-if fp32->bf16", {"precision": ("fp32", "bf16")}), *_MODE_WHATIFS,
           *((TWO_CHANGES, {**ch, "precision": pr}) for _, ch in _MODE_WHATIFS
             for pr in (("fp32", "bf16"), ("bf16", "fp32"))))


def whatif_category(base: Config, target: Config) -> str:
    """The back-test category of a what-if from ``base`` to ``target``: a change of framework
    and mode (nothing else changed, the base at the default compile mode) listed in
    :data:`FRAMEWORK_WHATIFS` is judged by its own category (torch eager -> jax xla by
    ``what-if torch->jax``, jax xla -> torch eager by ``what-if jax->torch``, ...); any other change of mode by ``what-if eager->graph``, any
    other by ``what-if fp32->bf16``; a change of framework or mode and of precision by
    :data:`TWO_CHANGES`. A framework what-if not listed is not back-tested and borrows the
    category this gives it (:func:`dlperf.perfmodel.intervalchoice.interval_of` widens it)."""
    if len(whatif_changes(base, target)) > 1:
        return TWO_CHANGES
    for (src, dst), category in FRAMEWORK_WHATIFS.items():
        # the back-test pairs only stored points of the default compile mode: jax has no other
        if ((base.framework, base.mode) == src and base.compile_mode == "default"
                and base.with_(framework=dst[0], mode=dst[1]) == target):
            return category
    return "what-if eager->graph" if base.mode != target.mode else "what-if fp32->bf16"


def whatif_changes(base: Config, target: Config, batch_changed: bool = False,
                   host_ns: float | None = None) -> tuple[str, ...]:
    """What a what-if from ``base`` to ``target`` changes, each a change one back-test
    category judges alone: ``framework`` (with the mode it implies), else ``mode``;
    ``precision``; ``batch``; ``host speed``. Empty for no what-if. A framework or mode change
    with a precision change is judged by :data:`TWO_CHANGES`; any other two, or more, by no
    category (:data:`dlperf.perfmodel.intervalchoice.NOT_BACKTESTED`, :data:`JUDGED_CHANGES`)."""
    framework = target.framework != base.framework
    changed = {"framework": framework, "mode": not framework and target.mode != base.mode,
               "precision": target.precision != base.precision, "batch": batch_changed,
               "host speed": host_ns is not None}
    return tuple(change for change, yes in changed.items() if yes)


def changes_words(base: Config, target: Config) -> str:
    """The framework or mode change and the precision change of a what-if from ``base`` to
    ``target`` in words, one for each change :func:`whatif_changes` counts, ``"; "`` between:
    the framework with its mode (and compile mode) as one change (``framework and its mode
    jax/xla -> torch/graph``), else the mode (``mode torch/eager -> torch/graph``); the
    precision (``precision bf16 -> fp32``)."""
    def fw(c: Config) -> str:
        return "/".join([c.framework, c.mode] + ([c.compile_mode]
                                                 if c.compile_mode != "default" else []))
    words = {"framework": f"framework and its mode {fw(base)} -> {fw(target)}",
             "mode": f"mode {fw(base)} -> {fw(target)}",
             "precision": f"precision {base.precision} -> {target.precision}"}
    return "; ".join(words[change] for change in whatif_changes(base, target))


#: The changes a what-if category's back-test rows make at once (1 where not listed): a what-if
#: of more than its path judges borrows its interval
#: (:data:`dlperf.perfmodel.intervalchoice.NOT_BACKTESTED`).
JUDGED_CHANGES = {TWO_CHANGES: 2}


def steps_of(base: Config, target: Config, changes: tuple[str, ...]
             ) -> set[tuple[str, str, str]]:
    """The precision and mode changes among ``changes`` (:func:`whatif_changes`) of a what-if
    from ``base`` to ``target``, each ``(field, from, to)``."""
    return {(k, getattr(base, k), getattr(target, k)) for k in {"precision", "mode"} & {*changes}}


def _judged_steps() -> dict[str, frozenset[tuple[str, str, str]]]:
    """:data:`JUDGED_STEPS` read from :data:`WHATIFS`: each pair's steps as a what-if from its
    base to its target counts them."""
    made: dict[str, set[tuple[str, str, str]]] = {}
    for cat, ch in WHATIFS:
        base, target = (Config("", "", "", "").with_(**{k: v[i] for k, v in ch.items()})
                        for i in (0, 1))
        made.setdefault(cat, set()).update(steps_of(base, target, whatif_changes(base, target)))
    return {cat: frozenset(steps) for cat, steps in made.items()}


#: The precision and mode changes each what-if category's back-test rows make, ``(field,
#: from, to)``: those of its pairs in :data:`WHATIFS` as :func:`whatif_changes` counts them
#: (none for a framework what-if: its mode change is the framework's). :func:`whatif_category`
#: gives every other one (bf16 -> fp32, fp32 -> tf32, graph -> eager) the category of its
#: field, whose rows never made it, so its interval is borrowed
#: (:data:`dlperf.perfmodel.intervalchoice.NOT_BACKTESTED`).
JUDGED_STEPS = _judged_steps()
