"""tensorflow: see docs/architecture.md."""
