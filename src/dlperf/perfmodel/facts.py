"""What the stored records say of a configuration whatever a back-test withholds: its work
(FLOP and byte counts), its host-work counts (operators, XLA launches, kernels per step) and the
device ceilings its framework measured.

These are properties of a configuration's program and of the device, not timings: a count of
the model's code made without the device (operators), counts a compile of the program would
give (kernels, launches), microbenchmarks run beside a measurement (ceilings). So they are read
from every stored point, withheld ones too, and one :class:`Facts` of a set of records serves
every prediction and every back-test row made on them. :func:`facts_of` builds it once per
:class:`~dlperf.perfmodel.records.Records`.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel import special
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Records

#: The :class:`~dlperf.perfmodel.records.Point` attribute of each host-work count kind.
COUNT_ATTR = {"ops": "ops_per_step", "launches": "launches_per_iter",
              "kernels": "kernels_per_iter"}


class Facts:
    """Counts and ceilings of one set of records (module docstring).

    Built once per records (:func:`facts_of`): the host-work counts and the kinds counted per
    mode are tabled when it is made (one pass over the points); a work model and a ceiling are
    tabled when first asked for (pure functions of the records, each computed once).
    """

    def __init__(self, records: Records) -> None:
        self.records = records
        # (model, framework, precision, kind) -> group mode -> (count, on one device) of
        # every point that counted it
        self._counts: dict[tuple[str, str, str, str], dict[str, list[tuple[float, bool]]]] = \
            defaultdict(lambda: defaultdict(list))
        # (framework, group mode) -> the count kinds some point of it has
        self._kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
        for p in records.points:
            for kind, attr in COUNT_ATTR.items():
                c = getattr(p, attr)
                if c:
                    self._kinds[(p.framework, p.group[1])].add(kind)
                    self._counts[(p.model, p.framework, p.precision, kind)][p.group[1]]\
                        .append((c, p.world_size == 1))
        self._work: dict[tuple[str, str, str, str], rl.Work] = {}
        self._ceil: dict[tuple[str, str, str | None, str | None], rl.Ceiling] = {}

    def work(self, model: str, framework: str, precision: str, device: str) -> rl.Work:
        """The work model of (model, framework, precision) on device kind ``device``
        (:func:`roofline.work_of`) from the FLOP counts stored with any result (else the zoo
        spec's FLOPs) and the byte counts stored with the results of that device kind.

        Raises:
            roofline.NoFlopCount: no FLOP count anywhere.
        """
        from dlperf.zoo import SPECS

        spec = SPECS.get(model)
        return once(self._work, (model, framework, precision, device), lambda: rl.work_of(
            self.records.points, model, framework, precision, device,
            getattr(spec, "train_flops_per_sample", None), getattr(spec, "params", None)))

    def ceiling(self, framework: str, precision: str, device_name: str | None,
                without_model: str | None = None) -> rl.Ceiling:
        """Measured (else datasheet) ceilings (:func:`roofline.ceiling_of`) over the workers
        of every stored point but ``without_model``'s (the model predicted or fitted without).

        Raises:
            ValueError: nothing measured and no datasheet entry for the device.
        """
        return once(self._ceil, (framework, precision, device_name, without_model),
                    lambda: rl.ceiling_of([p for p in self.records.points
                                           if p.model != without_model], framework,
                                          precision, device_name))

    def kernel_count(self, model: str, framework: str, precision: str, mode: str
                     ) -> float | None:
        """Device kernels per step of (model, framework, precision) in group mode ``mode``,
        else in its base mode (:func:`special.base_mode`: a CUDA-graph replay runs the base
        mode's kernels): the median over the one-device points whose traced run counted them
        (``trace.kernels_per_iter``), so a point without a timeline of its own borrows its
        configuration's count from the other batch sizes. None where none was counted."""
        by_mode = self._counts.get((model, framework, precision, "kernels"), {})
        for m in dict.fromkeys((mode, special.base_mode(mode))):
            xs = [c for c, one in by_mode.get(m, ()) if one]
            if xs:
                return float(median(xs))
        return None

    def count_kind(self, framework: str, mode: str) -> str:
        """What :meth:`op_count` counts for ``framework`` in group mode ``mode``: the first of
        :func:`special.count_kinds` some stored point of that mode has (its first if none)."""
        order = special.count_kinds(framework, mode)
        return next((k for k in order if k in self._kinds.get((framework, mode), ())), order[0])

    def op_count(self, model: str, framework: str, precision: str, kind: str,
                 mode: str | None = None) -> int | None:
        """The host-work count of one step of (model, framework, precision): ``kind``
        (``ops``, ``launches`` or ``kernels``; :meth:`count_kind`), the upper median over every stored point (of
        group mode ``mode`` for kernels and launches, which a trace of that mode counts;
        operators are counted in eager mode whatever the run's mode), withheld ones included.
        A tf32 configuration without an operator count takes fp32's
        (:func:`special.operator_precision`). None where none was counted."""
        by_mode = self._counts.get((model, framework, precision, kind), {})
        xs = sorted(round(c) for m, cs in by_mode.items()
                    if kind == "ops" or mode is None or m == mode for c, _ in cs)
        if xs:
            return xs[len(xs) // 2]
        same = special.operator_precision(precision)
        return self.op_count(model, framework, same, kind, mode) \
            if kind == "ops" and same != precision else None


_FACTS: dict[int, tuple[Records, Facts]] = {}


def facts_of(records: Records) -> Facts:
    """The :class:`Facts` of ``records``, built once per records object."""
    hit = _FACTS.get(id(records))
    if hit is None or hit[0] is not records:
        hit = _FACTS[id(records)] = (records, Facts(records))
    return hit[1]

