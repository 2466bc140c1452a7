"""The fake framework's options: its whole scripted behaviour (:class:`Options`, given as a run
config's ``options``, ``--framework-option KEY=VALUE`` or ``options:`` in a sweep file) and its
option rules (registry ``options``; :mod:`dlperf.config.rules` calls them).

As the JAX and TensorFlow models, the fake "models" are NHWC, so ``--layout nchw`` is refused.

A process whose flags a test does not write (one side of ``dlperf compare --run``, whose two
sides run the same flags) takes options from the environment variable
:data:`ENV_OPTIONS`, a YAML mapping (``DLPERF_FAKE_OPTIONS='{slowdown: 1.05, seed: 2}'``);
a run config's ``options`` win over it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, field_validator

from dlperf.config.axes import DDPOptions

__all__ = ["Options", "ENV_OPTIONS", "settings", "check"]

#: How a scripted failure ends a step (:class:`Options` ``fail``).
FAILURES = ("oom", "memerr", "crash", "segv", "nan", "hang", "error")


class Options(DDPOptions):
    """What the fake framework does (times in seconds of its clock), and the options of
    PyTorch's ``DistributedDataParallel`` (:class:`~dlperf.config.axes.DDPOptions`: the fake
    stands in for PyTorch's launch, registry ``ddp``; it records them and runs no DDP).

    Attributes:
        step_s: the scripted step time.
        slowdown: a factor on every step's time (1.0: none): a slower build of the same point,
            for tests of a regression gate (the run key does not change, as it does not when
            a real framework's new version is slower).
        step_factors: factors on the step time by precision or batch size
            (``{"bf16": 0.5, "64": 1.9}``: a bf16 point steps in half the time, a batch of 64
            in 1.9 times it); keys are strings.
        fail: scripted failures by batch size (``{64: "oom", 128: "crash"}``, one of
            :data:`FAILURES`); ``fail_rank`` limits them to that data-parallel rank.
        real_clock: steps take real time (they sleep; the run's clock is
            ``time.perf_counter``), for tests that interrupt a run from outside.
        nvml: the run claims GPU 0 for NVML (with a real clock: the power sampler is a thread
            on the real clock).
        data_wait_s: with real data, each step first waits this long for its batch.
        breakdown_apart: ``--breakdown`` runs in a process of its own, as JAX's on a GPU.
        compile_before_s, compile_s, recompile_every, recompile_at, recompile_s: scripted
            compilation: work before the loop, added to the first step, a recompile at every
            K-th step (counted from 1) or at the listed steps, each adding ``recompile_s``
            (default 100 x the step).
        run_noise, noise, drift, mode_share, mode_factor, seed: scripted variation of the step
            times: one factor ``exp(run_noise * z)`` for the run, ``exp(noise * z)`` per step,
            ``1 + drift * k`` at step ``k``, and a random ``mode_share`` of the steps
            ``mode_factor`` times as long (two modes); draws from ``seed``, else fresh entropy.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: Options that make a different point (its run key): none; the fake's behaviour is a
    #: test's script, not what is measured.
    KEY_FIELDS: ClassVar[frozenset[str]] = frozenset()

    step_s: float = Field(0.001, gt=0.0)
    slowdown: float = Field(1.0, gt=0.0)
    step_factors: dict[str, float] = Field(default_factory=dict)
    fail: dict[int, str] = Field(default_factory=dict)
    fail_rank: int | None = Field(None, ge=0)
    real_clock: bool = False
    nvml: bool = False
    data_wait_s: float = Field(0.0, ge=0.0)
    breakdown_apart: bool = False
    compile_before_s: float = Field(0.0, ge=0.0)
    compile_s: float = Field(0.0, ge=0.0)
    recompile_every: int = Field(0, ge=0)
    recompile_at: list[int] = Field(default_factory=list)
    recompile_s: float | None = Field(None, ge=0.0)
    run_noise: float = Field(0.0, ge=0.0)
    noise: float = Field(0.0, ge=0.0)
    drift: float = 0.0
    mode_share: float = Field(0.0, ge=0.0, le=1.0)
    mode_factor: float = Field(1.0, gt=0.0)
    seed: int | None = None

    @field_validator("step_factors", mode="before")
    @classmethod
    def _keys_as_text(cls, v: Any) -> Any:
        """A batch size written as a number (``{64: 1.9}`` in YAML) is its key as text."""
        return {str(k): f for k, f in v.items()} if isinstance(v, Mapping) else v

    @field_validator("fail")
    @classmethod
    def _known_failures(cls, v: dict[int, str]) -> dict[int, str]:
        for b, kind in v.items():
            if kind not in FAILURES:
                raise ValueError(f"fail {b}: {kind!r}: give one of {', '.join(FAILURES)}")
        return v

    @property
    def compiles(self) -> bool:
        """Whether any compilation is scripted."""
        return bool(self.compile_before_s or self.compile_s or self.recompile_every
                    or self.recompile_at or self.recompile_s)

    def step_factor(self, precision: str, batch_size: int) -> float:
        """The product of :attr:`step_factors` whose key is ``precision`` or ``batch_size``,
        times :attr:`slowdown`."""
        f = self.slowdown
        for key, value in self.step_factors.items():
            if key in (precision, str(batch_size)):
                f *= value
        return f

    def failure(self, batch_size: int) -> str | None:
        """The failure scripted for ``batch_size``, if any."""
        return self.fail.get(batch_size)


#: The environment variable of options for a process whose flags a test does not write: a
#: YAML mapping of :class:`Options` fields.
ENV_OPTIONS = "DLPERF_FAKE_OPTIONS"


def settings(options: Mapping[str, Any] | None = None,
             env: Mapping[str, str] | None = None) -> Options:
    """The fake's :class:`Options`: ``options`` (a run config's) over those of
    :data:`ENV_OPTIONS` in the environment ``env`` (default ``os.environ``).

    Raises:
        ConfigError: :data:`ENV_OPTIONS` is not a YAML mapping.
        pydantic.ValidationError: an unknown option or a value of the wrong kind, naming it.
    """
    text = (os.environ if env is None else env).get(ENV_OPTIONS, "")
    given: Any = {}
    if text.strip():
        from dlperf.errors import ConfigError
        from dlperf.yamlsafe import load_yaml

        given = load_yaml(text, ENV_OPTIONS)
        if not isinstance(given, dict):
            raise ConfigError(f"{ENV_OPTIONS}={text!r}: give a YAML mapping of the fake "
                              "framework's options, e.g. '{slowdown: 1.05}'")
    return Options.model_validate({**given, **(options or {})})


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of the fake
    framework) that are its own, as ``(field, message)``; ``[]`` when there are none."""
    if cfg.runtime.layout == "nchw":
        return [("layout", f"layout 'nchw' is a PyTorch option: the {cfg.runtime.framework} models are "
                           "NHWC (channels last); use --layout auto or nhwc")]
    return []
