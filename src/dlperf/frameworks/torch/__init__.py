"""torch: see docs/architecture.md."""
