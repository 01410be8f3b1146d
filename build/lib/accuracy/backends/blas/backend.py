"""Every CBLAS library found on this machine as a backend of its own: `blas-<provider>`."""

from __future__ import annotations

from functools import cache

from accuracy.backends.base import Backend


class BlasBackend(Backend):
    """One CBLAS library loaded by path (accuracy.backends.blas); its namespace is the Provider itself.

    Loading registered the library with threadpoolctl, so the inherited thread_limit limits it.
    """

    def __init__(self, provider):
        self.provider = provider
        self.name = f"blas-{provider.name}"

    def available(self) -> bool:
        return True

    @property
    def namespace(self):
        return self.provider


@cache
def blas_discovery():
    """Every BLAS library found on this machine (loaded once per process); failures are listed."""
    from accuracy.backends.blas import discover_providers

    return discover_providers()


@cache
def blas_backends() -> dict[str, BlasBackend]:
    backends = (BlasBackend(p) for p in blas_discovery().providers.values())
    return {b.name: b for b in backends}
