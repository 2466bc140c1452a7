"""A `file:` model for JAX (the contract: docs/zoo.md, "file: and entry-point models").

    dlperf run --framework jax --model file:examples/jax_mlp.py:mlp --batch-size 32
    dlperf run --framework jax --model "file:examples/jax_mlp.py:mlp?width=256"

``mlp(width, features, classes)`` returns ``(model, make_batch, loss)``: a Flax module whose
``__call__(x, train)`` gives logits, a batch maker ``make_batch(batch_size, key) -> (x, y)``
drawing from ``jax.random``, and the mean softmax cross-entropy.
"""

import flax.linen as nn
import jax
import optax


class MLP(nn.Module):
    """features -> width -> classes, ReLU."""

    width: int
    classes: int

    @nn.compact
    def __call__(self, x, train: bool):
        return nn.Dense(self.classes)(nn.relu(nn.Dense(self.width)(x)))


def mlp(width: int = 64, features: int = 32, classes: int = 10):
    """The model, its batch maker and its loss (dlperf calls this once per run)."""

    def make_batch(batch_size, key):
        kx, ky = jax.random.split(key)
        x = jax.random.normal(kx, (batch_size, features))
        y = jax.random.randint(ky, (batch_size,), 0, classes)
        return x, y

    def loss(logits, y):
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return MLP(width, classes), make_batch, loss
