"""``dlperf list [models|suites|frameworks|datasets|devices]``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from dlperf.cli import common
from dlperf.cli.common import guard
from dlperf.errors import unknown_choice

LIST_WHAT = ("models", "suites", "frameworks", "datasets", "devices")


def installed_version(framework: str) -> str | None:
    """The framework's version from package metadata without importing it (its registry
    ``distributions``); ``"no: ..."`` if a needed distribution is missing; None when unknown
    here (ask the adapter)."""
    from importlib.metadata import PackageNotFoundError, version

    from dlperf.registry import framework_info

    info = framework_info(framework)
    if info is None or not info.distributions:
        return None
    found = []
    for alternatives in info.distributions:
        for d in alternatives:
            try:
                found.append(version(d))
                break
            except PackageNotFoundError:
                continue
        else:
            from dlperf.install import install_hint

            how = install_hint(*info.extras) if info.extras else info.setup
            return f"no: {alternatives[0]} is not installed; {how}"
    return found[0]



def _gflop(flops: int | None) -> str:
    """FLOPs as GFLOP to 4 significant digits; ``-`` where they are unknown (None)."""
    return "-" if flops is None else f"{flops / 1e9:.4g}"


def _models() -> None:
    from rich.table import Table

    from dlperf.zoo import SPECS

    t = Table(title="models")
    for c in ("name", "family", "input", "classes", "params", "train GFLOP/sample", "real data",
              "source"):
        t.add_column(c)
    for s in SPECS.values():
        t.add_row(s.name, s.family, f"{s.input_kind} {'x'.join(map(str, s.input_shape))}",
                  str(s.num_classes), f"{s.params:,}", _gflop(s.train_flops_per_sample),
                  ", ".join(s.real_data), s.source)
    common.print_table(t)


def _suites() -> None:
    from rich.table import Table

    from dlperf.zoo import SUITES

    t = Table(title="suites")
    t.add_column("suite")
    t.add_column("entries (model[:data])")
    for n, es in SUITES.items():
        t.add_row(n, ", ".join(e.model + ("" if e.data == "synthetic" else f":{e.data}")
                               for e in es))
    common.print_table(t)


def _frameworks() -> None:
    from rich.table import Table

    from dlperf.frameworks import ADAPTERS, get_adapter
    from dlperf.registry import FRAMEWORK_MODES

    t = Table(title="frameworks")
    for c in ("framework", "modes", "installed"):
        t.add_column(c)
    for n in ADAPTERS:
        ver = installed_version(n)  # from package metadata: importing TF takes seconds
        if ver is None:
            ok, ver = get_adapter(n).available()
            ver = ver if ok else f"no: {ver}"
        t.add_row(n, ", ".join(FRAMEWORK_MODES.get(n, ())), escape(ver))  # 'dlperf[jax]'
    common.print_table(t)


def _datasets() -> None:
    from dlperf.data import DATASETS, data_root

    root = data_root(None)
    common.out.print(f"data sets: {', '.join(DATASETS)} (data root: "
                     f"{root if root else 'not set; use --data-dir or DLPERF_DATA'})")


def _devices() -> None:
    from dlperf import nvml
    from dlperf.env import cpu_model

    common.out.print(f"cpu: {cpu_model()}")
    for g in nvml.gpus():
        common.out.print(f"cuda:{g['index']}: {g.get('name')} "
                         f"({g.get('memory_total_bytes', 0) / 2**30:.0f} GiB, driver "
                         f"{g.get('driver')})")


_SHOW = {"models": _models, "suites": _suites, "frameworks": _frameworks,
         "datasets": _datasets, "devices": _devices}


def list_(what: Annotated[str | None, typer.Argument(help=f"One of: {', '.join(LIST_WHAT)} (default: all).")] = None) -> None:
    """List models, suites, frameworks, data sets and devices."""
    def body() -> None:
        if what is not None and what not in LIST_WHAT:
            raise unknown_choice("list topic", what, LIST_WHAT)
        for topic in [what] if what else LIST_WHAT:
            _SHOW[topic]()

    guard(body)
