"""The frozen development / test split of stored results (``benchmarks/results/split.json``).

The unit is the model: every point of a model, in every results file, device, precision and
batch size, is on one side (``benchmarks/results/SPLIT.md`` says why). The file lists the test
and development models of the zoo; a model in neither list (``hf:``, ``timm:``, ``file:``, or
one added to the zoo later) and an all-reduce run are test when
``int(sha256(salt + name)[:8], 16) / 2**32 < test_share`` (the file's rule, reproduced here).

This module is the one reader of that file: the back-test and the validation table ask it which
side a held-out row is on; constants of the model are chosen on :data:`DEVELOPMENT` rows only.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, StrictStr, ValidationError

DEVELOPMENT = "development"
TEST = "test"
SIDES = (DEVELOPMENT, TEST)

#: The committed split beside the committed results (a source checkout's path).
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "split.json"


@dataclass(frozen=True)
class Split:
    """Which side of the frozen split a model or an all-reduce run is on.

    Attributes:
        test_models, development_models: the zoo models listed in the file.
        salt: the hash salt of the rule (``dlperf-split-v1:``).
        test_share: the share a hashed name must fall under to be test (0.3).
    """

    test_models: frozenset[str]
    development_models: frozenset[str]
    salt: str
    test_share: float = 0.3

    def _hashed_side(self, name: str) -> str:
        """The file's rule: :data:`TEST` when ``sha256(salt + name)`` falls under
        :attr:`test_share`."""
        h = hashlib.sha256((self.salt + name).encode()).hexdigest()
        return TEST if int(h[:8], 16) / 2**32 < self.test_share else DEVELOPMENT

    def side_of_model(self, model: str) -> str:
        """:data:`TEST` or :data:`DEVELOPMENT` for a model name (``resnet50``, ``hf:gpt2``)."""
        if model in self.test_models:
            return TEST
        if model in self.development_models:
            return DEVELOPMENT
        return self._hashed_side(model)

    def side_of_run(self, run_id: str) -> str:
        """:data:`TEST` or :data:`DEVELOPMENT` for an all-reduce run id (the hash rule)."""
        return self._hashed_side(run_id)

    def side(self, model: str | None, run_id: str | None = None) -> str:
        """The side of a held-out prediction: by its model, else by its all-reduce run id;
        :data:`DEVELOPMENT` when it has neither (a row of no stored model)."""
        if model:
            return self.side_of_model(model)
        if run_id:
            return self.side_of_run(run_id)
        return DEVELOPMENT


class _SplitFile(BaseModel):
    """What :func:`load` reads of a split file (its other keys say how the split was made)."""

    salt: StrictStr
    test_models: list[StrictStr]
    development_models: list[StrictStr]


def load(path: str | os.PathLike | None = None) -> Split:
    """Read a split file (``split.json``; None: :data:`DEFAULT_PATH`).

    Raises:
        ConfigError: the file is missing, not JSON, or lacks ``salt`` / ``test_models`` /
            ``development_models`` of the right types (the message names the file).
    """
    from dlperf.errors import ConfigError

    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the development/test split {p}: {e}") from e
    try:
        f = _SplitFile.model_validate(d)
    except ValidationError:
        raise ConfigError(f"{p} is not a split file: it needs a string 'salt' and lists of "
                          "model names 'test_models' and 'development_models'") from None
    return Split(frozenset(f.test_models), frozenset(f.development_models), f.salt)
