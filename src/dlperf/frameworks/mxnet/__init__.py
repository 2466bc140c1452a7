"""mxnet: see docs/architecture.md."""
