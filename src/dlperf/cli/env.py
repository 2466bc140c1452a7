"""``dlperf env``: the environment fingerprint recorded with every result."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import guard


def env(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        framework: Annotated[bool, typer.Option(help="Also import the frameworks for their versions.")] = True) -> None:
    """Print the environment fingerprint recorded with every result."""
    def body() -> None:
        from dlperf.env import collect_env
        from dlperf.frameworks import ADAPTERS, get_adapter

        e = collect_env()
        if framework:
            e["frameworks"] = {n: get_adapter(n).available()[1] for n in ADAPTERS}
        if as_json:
            sys.stdout.write(json.dumps(e, indent=1, default=str) + "\n")
        else:
            from rich.pretty import pprint

            pprint(e, console=common.out, expand_all=True)

    guard(body)
