"""Steps that kernels evaluate by approximations of bounded *absolute* error (or of more ulps
than a libm's).

The typical tier gives a libm call an error of LIBM_ULPS ulps of its result: what a vectorised
libm promises. Some kernels keep a fixed absolute accuracy instead, which is many ulps wherever the
result is small:

- the GELU kernels PyTorch runs on x86 CPUs compute erf by the polynomial of Abramowitz & Stegun
  7.1.26 (|error| <= 1.5e-7): oneDNN's gelu_erf below avx512_core (PyTorch's float32 F.gelu goes
  there whenever oneDNN is enabled, and OpenVINO's CPU plugin always), and ATen's
  Vectorized<float>::erf at the AVX2 and AVX-512 dispatch levels. From avx512_core up, oneDNN
  evaluates the whole GELU by a piecewise minimax polynomial instead: within 1.6 ulp near 0, and
  1.2e-6 absolute at most on [-6, 6] (measured on a Zen 4 host). The typical tier of gelu models
  the A&S kernel whatever the level (CORRECT_KERNELS): its erf step's error is uniform in
  +-max(LIBM_ULPS ulp, 1.5e-7), which the minimax kernel stays inside (typical ratio 0.54-0.68).
- a runtime's declared finding (ONNX Runtime's MLAS Sigmoid) is a kernel of the same kind whose
  error is *not* a correct kernel's: its record is kept by the catalog (catalog/runtime_limits.py)
  and applied only to tell a unit's runtime limit from its port's bug.

Both emulations read the approximations in force from a context variable (`using`), and the fused
op being evaluated from `inside`, so that the same formula is modelled with or without them.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# numpy's names of the functions (the numpy emulation sees scipy's ufuncs)
NUMPY_NAMES = {"sigmoid": "expit", "erf": "erf"}


@dataclass(frozen=True)
class Approximation:
    """A kernel's step `function` (a torch op name) with |error| <= max(`absolute`, `ulps` ulp of
    its result) wherever it runs: inside the fused ops `within` only (empty: anywhere), and the
    fused ops in `expands` computed through it (ONNX Runtime's SiLU is x * Sigmoid(x))."""

    function: str
    absolute: float
    kernels: str  # who runs it, for the reason a verdict gives
    within: frozenset[str] = frozenset()
    expands: frozenset[str] = frozenset()
    ulps: float = 0.0  # where wider than a libm's LIBM_ULPS: a kernel that flushes tiny results keeps fewer digits

    def applies(self, function: str, inside: tuple[str, ...]) -> bool:
        names = {self.function, NUMPY_NAMES.get(self.function, self.function)}
        return _plain(function) in names and (not self.within or bool(self.within & {_plain(op) for op in inside}))


def _plain(op: str) -> str:
    """An ATen op's name without its in-place mark: `nn.SiLU(inplace=True)` runs aten.silu_, the
    same kernel as aten.silu (torchvision's EfficientNets)."""
    return op.removesuffix("_")


ERF_AS_7_1_26 = Approximation(
    "erf",
    1.5e-7,
    "oneDNN's gelu_erf below avx512_core and ATen's AVX2/AVX-512 vectorized erf: Abramowitz & Stegun 7.1.26, "
    "|error| <= 1.5e-7",
    within=frozenset({"gelu"}),
)
CORRECT_KERNELS: tuple[Approximation, ...] = (ERF_AS_7_1_26,)

_IN_FORCE: contextvars.ContextVar[tuple[Approximation, ...]] = contextvars.ContextVar(
    "approximations", default=CORRECT_KERNELS
)
_INSIDE: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("inside", default=())


@contextmanager
def using(extra: tuple[Approximation, ...]) -> Iterator[None]:
    """The correct kernels' approximations and `extra` in force (a runtime's declared limits)."""
    token = _IN_FORCE.set((*_IN_FORCE.get(), *extra))
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


@contextmanager
def exactly(approximations: tuple[Approximation, ...]) -> Iterator[None]:
    """Exactly these approximations in force, the correct kernels' left out: what the tier would
    be without them (the tests' control, and the self-test's)."""
    token = _IN_FORCE.set(approximations)
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


@contextmanager
def inside(op: str) -> Iterator[None]:
    """Steps evaluated from here on are steps of the fused op `op`'s kernel."""
    token = _INSIDE.set((*_INSIDE.get(), op))
    try:
        yield
    finally:
        _INSIDE.reset(token)


def here() -> tuple[tuple[Approximation, ...], tuple[str, ...]]:
    """The approximations in force and the fused ops being evaluated: what `step_ulps` and
    `absolute_error` read (an emulation keeps their answers while these stay the same objects)."""
    return _IN_FORCE.get(), _INSIDE.get()


def absolute_error(function: str) -> float:
    """The largest absolute error an approximation in force gives `function` at this point (0: none)."""
    here = _INSIDE.get()
    return max((a.absolute for a in _IN_FORCE.get() if a.applies(function, here)), default=0.0)


def step_ulps(function: str, width: float) -> float:
    """The half-width in ulps of `function`'s step at this point: its own `width`, or an
    approximation's wider one."""
    here = _INSIDE.get()
    return max([width, *(a.ulps for a in _IN_FORCE.get() if a.applies(function, here))])


def expanded(op: str) -> bool:
    """Whether an approximation in force computes the fused op `op` through its step."""
    return any(_plain(op) in a.expands for a in _IN_FORCE.get())


def in_force() -> tuple[Approximation, ...]:
    return _IN_FORCE.get()


def key() -> str:
    """What a cached typical tier depends on here: the approximations in force."""
    text = ";".join(
        f"{a.function}:{a.absolute!r}:{a.ulps!r}:{sorted(a.within)}:{sorted(a.expands)}" for a in _IN_FORCE.get()
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]
