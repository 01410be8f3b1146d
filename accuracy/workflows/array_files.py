"""Arrays in the files other frameworks write: .npy, .npz, .safetensors and PyTorch's .pt.

A user brings inputs and outputs from TensorFlow, JAX, LibTorch, Java or C++. Every failure to
read one is an OpbenchError naming the file, never a traceback: a bad file is bad input.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from accuracy.core.errors import OpbenchError

READABLE = (".npy", ".npz", ".safetensors", ".pt")
WRITABLE = (".npz", ".safetensors")  # keyed files: one array per input name
NPY_MAGIC = b"\x93NUMPY"


def as_array(value, where: str) -> np.ndarray:
    """A numpy array from what a Python caller holds: an array, a torch tensor or a list."""
    if type(value).__module__.split(".")[0] == "torch":
        return _from_torch(where, value)
    try:
        return np.asarray(value)
    except Exception as exc:
        raise OpbenchError(f"{where}: not an array ({type(value).__name__}: {exc})") from None


def _from_torch(where, value) -> np.ndarray:
    import torch

    if not isinstance(value, torch.Tensor):
        raise OpbenchError(f"{where}: holds a {type(value).__name__}, not a tensor")
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:  # numpy has no bfloat16: reinterpret the bits as ml_dtypes'
        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()


def _load_pt(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    import torch

    loaded = torch.load(path, map_location="cpu", weights_only=True)  # no pickled code runs
    if isinstance(loaded, dict):
        return {str(k): _from_torch(path, v) for k, v in loaded.items()}
    return _from_torch(path, loaded)


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.torch import load_file  # the torch loader knows bfloat16; numpy's does not

    return {k: _from_torch(path, v) for k, v in load_file(path).items()}


def _first_bytes(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(NPY_MAGIC))


def _load(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    suffix = path.suffix.lower()
    if suffix not in READABLE:
        raise OpbenchError(f"{path}: unknown file type {suffix or '(none)'}; use {', '.join(READABLE)}")
    if not path.is_file():
        raise OpbenchError(f"{path}: no such file")
    try:
        if suffix == ".pt":
            return _load_pt(path)
        if suffix == ".safetensors":
            return _load_safetensors(path)
        if suffix == ".npy" and _first_bytes(path) != NPY_MAGIC:  # np.load would guess "pickled data"
            raise OpbenchError(f"{path}: not a .npy file (it does not start with numpy's magic bytes)")
        loaded = np.load(path, allow_pickle=False)  # a pickled object array could run code
        if suffix == ".npz":
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return loaded
    except OpbenchError:
        raise
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OpbenchError(f"{path}: cannot read it as {suffix}: {detail}") from None


def read_arrays(path: Path | str) -> dict[str, np.ndarray]:
    """Named arrays (a model's inputs): an .npz, .safetensors or a .pt holding a dict."""
    path = Path(path)
    loaded = _load(path)
    if not isinstance(loaded, dict):
        raise OpbenchError(f"{path}: holds one unnamed array; inputs need names (save them as .npz or .safetensors)")
    return loaded


def read_array(path: Path | str) -> np.ndarray:
    """One array (an output): an .npy or .pt tensor, or a keyed file holding exactly one."""
    path = Path(path)
    loaded = _load(path)
    if isinstance(loaded, dict):
        if len(loaded) != 1:
            raise OpbenchError(
                f"{path}: holds {len(loaded)} arrays ({', '.join(loaded) or 'none'}); an output file needs exactly one"
            )
        loaded = next(iter(loaded.values()))
    return loaded


def write_arrays(path: Path | str, arrays: dict[str, np.ndarray], *, force: bool = False) -> Path:
    """Save named arrays; an existing file is kept unless `force`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in WRITABLE:
        raise OpbenchError(f"{path}: cannot save {suffix or 'a file without extension'}; use {', '.join(WRITABLE)}")
    if path.exists() and not force:
        raise OpbenchError(f"{path}: already exists; pass --force to overwrite it")
    if not path.parent.is_dir():
        raise OpbenchError(f"{path}: directory {path.parent} does not exist")
    if suffix == ".npz":
        if any(a.dtype == ml_dtypes.bfloat16 for a in arrays.values()):
            raise OpbenchError(f"{path}: the .npy format has no bfloat16; save to a .safetensors file")
        with open(path, "wb") as handle:  # given a name, np.savez appends .npz to any other spelling (.NPZ)
            np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    else:
        from safetensors.numpy import save_file

        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, path)
    return path
