"""fake: see docs/architecture.md."""
