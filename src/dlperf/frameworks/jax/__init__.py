"""The JAX framework (mode ``xla``): ``adapter.py`` (JaxAdapter, JaxRun), ``step.py`` (the one
staged training step), ``input.py`` (batches), ``probes.py`` (FLOPs, memory, versions,
ceilings), ``dist.py`` (data parallelism), ``profile.py`` (jax.profiler). See
docs/architecture.md."""
