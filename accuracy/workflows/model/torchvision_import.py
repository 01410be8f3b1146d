"""Import torchvision beside a torch build its C++ ops were not compiled for.

The torchvision wheel here is a CUDA build; beside the CPU torch its C++ library does not load.
Its Python model code (resnet18 and the rest) is plain PyTorch and works, but its import fails
in `torchvision/_meta_registrations.py`: every fake registration there is guarded by
`torchvision.extension._has_ops()` except `register_fake("torchvision::nms")`, which needs the
operator's schema (`torchvision::qnms` likewise). Where torchvision's C++ library does not load,
defining those two schemas (as torchvision's C++ declares them) before the import lets
torchvision import; `nms` itself then still fails when called, as any torchvision op without its
C++ library does. Where the library loads, nothing is defined. transformers imports
torchvision when it is installed, so its models go through here too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from accuracy.core.errors import OpbenchError
from accuracy.core.private_apis import transformers_without_sklearn

UNGUARDED_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # the torch.library fragment that holds the schema, kept alive for the process


def _define_unguarded_schemas(spec) -> None:
    """The schemas torchvision's import registers fakes for, where its C++ library cannot load."""
    global _library
    import torch

    library = Path(spec.origin).parent / "_C.so"
    try:
        torch.ops.load_library(library)  # what torchvision.extension tries first
        return
    except (ImportError, OSError):
        pass
    if _library is None:
        _library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in UNGUARDED_SCHEMAS:
            _library.define(schema)


def import_torchvision() -> ModuleType:
    """torchvision, importable whether or not its C++ ops load: imported plainly first, as a
    release whose import guards every registration (0.29.2 beside torch 2.15.0, in a port's own
    environment) imports, and where defining the schemas would clash with its C++ library's own
    (a duplicate registration aborts the process); the schemas only where that import fails."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        raise OpbenchError("torchvision is not installed (pip install 'opbench[models]')")
    if "torchvision" not in sys.modules:
        try:
            import torchvision

            return torchvision
        except RuntimeError as exc:
            if "torchvision::" not in str(exc):
                raise
            for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
                del sys.modules[name]  # the half-imported package: imported again below
        _define_unguarded_schemas(spec)
    import torchvision

    return torchvision


def prepare_plain_imports() -> None:
    """Let a user's own module import torchvision and transformers plainly (`from transformers
    import LlamaModel`), as the zoo's go through here: torchvision's schemas where its C++ library
    does not load, transformers offline and without TensorFlow. Neither is imported here."""
    import logging
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("USE_TF", "0")  # transformers would otherwise import tensorflow (tens of seconds)
    # transformers imports torchao where it is installed (the deploy extra's ExecuTorch brings it):
    # its CUDA kernels' load failures and torch's notes on its enums are not the user's concern
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    spec = importlib.util.find_spec("torchvision")
    if spec is not None and "torchvision" not in sys.modules:
        _define_unguarded_schemas(spec)


def import_transformers() -> ModuleType:
    """transformers, which imports torchvision when it is installed; offline (no downloads)."""
    if importlib.util.find_spec("transformers") is None:
        raise OpbenchError("transformers is not installed (pip install 'opbench[models]')")
    prepare_plain_imports()
    import transformers

    transformers_without_sklearn(transformers)
    return transformers
