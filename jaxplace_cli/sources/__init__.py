"""Foreign inputs turned into model types: ``jax.profiler`` traces (``.xplane.pb``) from any
backend (CPU, CUDA, ROCm, TPU). Everything read here is untrusted (docs/security.md)."""
