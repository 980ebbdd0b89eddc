"""felix-jax: a JAX-vectorized fleet emulator for cross-device federated learning.

Layers (see docs/architecture.md): ``felix_jax.traces`` (availability and device traces),
``felix_jax.models`` (flax model zoo), ``felix_jax.data`` (federated data on the
device), ``felix_jax.cohort`` (the vectorized cohort engine).
"""

__version__ = "0.1.0"
