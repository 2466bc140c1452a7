"""The zoo's activation table (dlperf.zoo.activations) is what the meta-device count gives
today: a model whose layers change must have its row re-pasted, or the memory check before a
run (dlperf.guards) would use stale sizes."""

from __future__ import annotations

import pytest

from dlperf.zoo import SPECS
from dlperf.zoo.activations import ACTIVATION_BYTES, activation_bytes, leaf_output_bytes

pytest.importorskip("torch")


def test_every_zoo_model_has_a_row_and_nothing_else_does():
    assert set(ACTIVATION_BYTES) == set(SPECS)
    assert activation_bytes("hf:gpt2") is None


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_row_is_the_meta_device_count(name):
    assert leaf_output_bytes(SPECS[name]) == ACTIVATION_BYTES[name], (
        "re-paste the table: python -m dlperf.zoo.activations")


def test_the_count_scales_with_the_input():
    """A tiny model's activations are smaller than its full model's (a count that ignored the
    layers' outputs would not see it)."""
    assert ACTIVATION_BYTES["resnet50_tiny"] * 10 < ACTIVATION_BYTES["resnet50"]
    assert ACTIVATION_BYTES["gpt2_small_tiny"] * 10 < ACTIVATION_BYTES["gpt2_small"]
