"""jax: see docs/architecture.md."""
