"""The child process of :mod:`dlperf.zoo.sources.custom.isolated`: ``python -m
dlperf.zoo.sources.custom.spec_child NAME OUT`` makes the spec of model ``NAME`` here (outside
any bound, so in this process) and pickles the answer to the file ``OUT``."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

from dlperf.errors import DlperfError


def main(argv: list[str]) -> int:
    """The child: make the spec of ``argv[0]`` in this process and pickle the answer to
    ``argv[1]``: ``("ok", spec)`` or ``("error", error class name, message)``."""
    name, out = argv
    answer: tuple[Any, ...]
    try:
        from dlperf.zoo import get_spec

        answer = ("ok", get_spec(name))
    except DlperfError as e:
        answer = ("error", type(e).__name__, str(e))
    except BaseException as e:  # noqa: BLE001 - the user's code: every outcome is an answer
        answer = ("error", "ConfigError", f"model {name!r}: making its spec raised "
                                          f"{type(e).__name__}: {e}")
    try:
        data = pickle.dumps(answer)
    except Exception as e:  # noqa: BLE001 - a spec that does not pickle
        data = pickle.dumps(("error", "ConfigError", f"model {name!r}: its spec cannot be "
                                                     f"passed back ({e})"))
    Path(out).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
