"""mxnet: MXNet 1.9.1 (Gluon), run in its own interpreter. ``adapter.py`` (the adapter and the
prepared run), ``step.py`` (the one staged training step), ``input.py`` (the batches); see
docs/frameworks.md."""
