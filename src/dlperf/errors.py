"""Exception types shared by every part of dlperf.

Every error a user can cause (a bad flag, config value or data file) is a :class:`DlperfError`
whose message names the bad value and how to fix it; the CLI prints it without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DlperfError(Exception):
    """Base class for errors that are the user's to fix; the message says how."""


class ConfigError(DlperfError, ValueError):
    """A run or sweep configuration value is invalid."""


class DataError(DlperfError, ValueError):
    """A data file is missing, corrupt, truncated or does not fit the model."""


class DataMissing(DataError):
    """A data set is not present where it was looked for: no data root set, the data root, the
    data set's folder or path does not exist, or it holds none of the data set's files (not
    downloaded or not made yet).

    Unlike a corrupt file or data that do not fit a model (a plain :class:`DataError`), this
    says nothing about the configuration: providing the data and running again measures the
    point. ``dlperf sweep`` therefore records the points of a missing data set as
    ``unavailable`` results and runs the others (:func:`dlperf.sweep.preflight`);
    ``dlperf run`` refuses it like any :class:`DataError`.
    """


class UnavailableError(DlperfError, RuntimeError):
    """A framework or device that was asked for is not installed or not present."""


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite; the run is recorded as ``nan_loss``."""


class OutOfMemory(RuntimeError):
    """The device ran out of memory; the run is recorded as ``oom``."""


def unknown_choice(what: str, value: str, choices: Iterable[str], *,
                   plural: str | None = None) -> ConfigError:
    """Build the error for a value that is not one of ``choices``.

    The message names the bad value, a close match if there is one ("did you mean"), and every
    valid choice, e.g. ``unknown model 'resnt50'; did you mean 'resnet50'? valid models: ...``.
    ``plural`` overrides the plural of ``what`` used before the list (default ``what + "s"``).
    """
    choices = sorted(choices)
    return ConfigError(f"unknown {what} {value!r}{did_you_mean(value, choices) or ';'} valid "
                       f"{plural or what + 's'}: {', '.join(choices)}")


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` with the closest of ``choices`` (difflib's ratio, at least
    its default cutoff 0.6), every one equally close named in the order of ``choices``
    (``'resnet50' or 'resnet56'`` for ``resnet5``), or ``""``; a choice equal but for case (``LSTM`` for ``lstm``) alone."""
    choices = list(choices)
    same = [c for c in choices if str(c).lower() == str(value).lower()]
    if same:
        return f"; did you mean {same[0]!r}?"
    # difflib.get_close_matches' score and cutoff, every choice of the best score kept
    score = [difflib.SequenceMatcher(None, str(c), str(value)).ratio() for c in choices]
    best = max(score, default=0.0)
    if best < 0.6:
        return ""
    tied = [c for c, r in zip(choices, score, strict=True) if r == best]  # in the choices' order
    return f"; did you mean {' or '.join(repr(c) for c in tied)}?"


def with_article(word: object) -> str:
    """``word`` with its indefinite article, for messages: ``"an int"``, ``"a str"``,
    ``"an 8-tuple"``. By the first letter (a, e, i, o, u take ``an``) or number (8, 11, 18
    and their 80s/800s... spoken with a vowel: ``an 11-tuple``); a rule of thumb, not a
    pronunciation dictionary (``a UUID`` reads as ``an UUID``)."""
    text = str(word)
    digits = text[:len(text) - len(text.lstrip("0123456789"))]
    if digits:
        vowel = digits.startswith("8") or (len(digits) % 3 == 2 and digits[:2] in ("11", "18"))
    else:
        vowel = text[:1].lower() in ("a", "e", "i", "o", "u")
    return f"{'an' if vowel else 'a'} {text}"
