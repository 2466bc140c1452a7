"""A `file:` model for TensorFlow (the contract: docs/zoo.md, "file: and entry-point models").

    dlperf run --framework tensorflow --model file:examples/keras_mlp.py:mlp --batch-size 32
    dlperf run --framework tensorflow --mode xla --model "file:examples/keras_mlp.py:mlp?width=256"

``mlp(width, features, classes)`` returns ``(model, make_batch, loss)``: a Keras model (not
built: dlperf builds it on its first batch), a batch maker ``make_batch(batch_size) -> (x, y)``
drawing from TensorFlow's random ops (dlperf seeds them with ``--seed``), and Keras's sparse
categorical cross-entropy on logits, which Keras calls as ``loss(y_true, y_pred)``.
"""

import keras
import tensorflow as tf


def mlp(width: int = 64, features: int = 32, classes: int = 10):
    """The model, its batch maker and its loss (dlperf calls this once per run)."""
    model = keras.Sequential([keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(classes)], name="mlp")

    def make_batch(batch_size):
        x = tf.random.normal((batch_size, features))
        y = tf.random.uniform((batch_size,), 0, classes, dtype=tf.int64)
        return x, y

    return model, make_batch, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
