"""Model names of the sources: ``BODY?key=value&...`` options, their values, the canonical
form, and the entry-point group (imports nothing of dlperf's sources, so every source module
can use it)."""

from __future__ import annotations

from collections.abc import Mapping

from dlperf.errors import ConfigError

#: The entry-point group through which an installed package registers models.
ENTRY_POINT_GROUP = "dlperf.models"


def parse_value(text: str) -> int | float | bool | str:
    """An option value: ``"4"`` -> 4, ``"1e-3"`` -> 0.001, ``"true"``/``"false"`` -> bool,
    anything else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def split_options(name: str, text: str) -> tuple[str, dict[str, int | float | bool | str]]:
    """``"gpt2?layers=2&hidden=64"`` -> ``("gpt2", {"layers": 2, "hidden": 64})``.

    Raises:
        ConfigError: an option without ``=`` or a key given twice (``name`` is named).
    """
    body, _, query = text.partition("?")
    options: dict[str, int | float | bool | str] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ConfigError(f"model {name!r}: option {part!r} is not KEY=VALUE; write options "
                              f"as NAME?key=value&key=value")
        if key in options:
            raise ConfigError(f"model {name!r}: option {key!r} is given twice")
        options[key] = parse_value(value)
    return body, options


def join_options(body: str, options: Mapping[str, object]) -> str:
    """The canonical form ``body?k1=v1&k2=v2`` (keys sorted; no ``?`` without options), so
    the same model written with its options in another order has one name."""
    if not options:
        return body
    return body + "?" + "&".join(f"{k}={_text(v)}" for k, v in sorted(options.items()))


def _text(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
