"""Arrays in the files other frameworks write: .npy, .npz, .safetensors and PyTorch's .pt.

A user brings inputs and outputs from TensorFlow, JAX, LibTorch, Java or C++. Every failure to
read one is an OpbenchError naming the file, never a traceback: a bad file is bad input.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np

from accuracy.backends.pytorch import tensor_to_numpy
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.files import no_parent, not_a_file, write_atomic

READABLE = (".npy", ".npz", ".safetensors", ".pt")
WRITABLE = (".npz", ".safetensors")  # keyed files: one array per input name
NPY_MAGIC = b"\x93NUMPY"
# Array data one file may declare. Every element is then judged against an exact reference
# (mpmath or double-double, several float64 arrays each), so a file past this is refused from its
# headers, before anything is decompressed or allocated: a 3 MB .npz declaring 3 GB drove
# `opbench check` to 19.8 GB before.
MAX_FILE_BYTES = 1 << 30
# Peak memory per byte of array data read from files, measured as the growth of peak RSS between
# float32 files of 16 MB and 64 MB (inputs and output both that size): `check exp` rose 12.4 bytes
# per byte read (the arrays, their float64 copies, the exact reference's words, the errors in ulps).
# A file whose data times this is over the memory budget is refused from its headers.
ARRAY_MEMORY_FACTOR = 13
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors format's own limit on its JSON header


SHAPE_ITEM = re.compile(r"([A-Za-z_]\w*)=(\d+(?:x\d+)*)")
MAX_GENERATED_DIMS = 32  # numpy's own limit is 64; no model input has more than a handful
GENERATED_BYTES_PER_ELEMENT = 16  # the float64 normal draw plus its float32 rounding, held at once


def parse_shapes(text: str, flag: str = "--inputs") -> dict[str, tuple[int, ...]]:
    """NAME=D1xD2x...[,NAME=...] as {name: shape}, checked before anything is allocated: every
    item well-formed, each name once, at most MAX_GENERATED_DIMS dimensions, and all of them
    within half the memory available now (`input=100000000000x8` was a MemoryError traceback)."""
    from accuracy.core.limits import MEMORY_BUDGET_FRACTION, available_memory

    shapes: dict[str, tuple[int, ...]] = {}
    for item in text.split(","):
        found = SHAPE_ITEM.fullmatch(item.strip())
        if found is None:
            raise OpbenchError(
                f"{flag} {text}: {item!r} is neither an existing file nor a shape NAME=D1xD2x... (e.g. x=1x3x224x224)"
            )
        name, shape = found.group(1), tuple(int(d) for d in found.group(2).split("x"))
        if name in shapes:
            raise OpbenchError(f"{flag} {text}: {name} is given twice; give each input once")
        if len(shape) > MAX_GENERATED_DIMS:
            limit = MAX_GENERATED_DIMS
            raise OpbenchError(
                f"{flag} {text}: {name} has {len(shape)} dimensions, more than the {limit} opbench generates"
            )
        shapes[name] = shape
    needed = GENERATED_BYTES_PER_ELEMENT * sum(math.prod(shape) for shape in shapes.values())
    budget = int(available_memory() * MEMORY_BUDGET_FRACTION)
    if needed > budget:
        raise OpbenchError(
            f"{flag} {text}: generating these inputs needs about {needed / 1e9:.3g} GB, more than the budget of "
            f"{budget / 1e9:.1f} GB (half the memory available now); choose smaller shapes"
        )
    return shapes


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
    return tensor_to_numpy(value)


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


def _npy_bytes(f) -> tuple[int, str]:
    """Bytes of the array an .npy stream declares, and what it declares, from its header alone."""
    version = np.lib.format.read_magic(f)
    # format 3.0 is 2.0's layout with a UTF-8 header; the 2.0 reader parses the ASCII numpy writes
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _fortran, dtype = read(f)
    return math.prod(shape) * dtype.itemsize, f"shape {shape} {dtype}"


def _zip_bytes(path: Path, npz: bool) -> tuple[int, str]:
    """Bytes a zip (.npz, torch's .pt) unpacks to: each member's declared size, and for an .npz the
    shape its .npy header declares (numpy allocates that before reading a member's data)."""
    total, what = 0, []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            declared, shape = info.file_size, ""
            if npz and info.filename.endswith(".npy"):
                with archive.open(info) as member:
                    nbytes, shape = _npy_bytes(member)
                declared = max(declared, nbytes)
            total += declared
            what.append(f"{info.filename.removesuffix('.npy')} {shape or byte_size(declared)}")
    return total, ", ".join(what)


def _safetensors_bytes(path: Path) -> tuple[int, str]:
    """Bytes a .safetensors file's JSON header declares for its tensors (format: u64 length, header)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > SAFETENSORS_MAX_HEADER:
            raise ValueError(f"header of {length} bytes, more than the format allows")
        header = json.loads(f.read(length))
    tensors = _tensor_entries(path, header)
    total = sum(int(v["data_offsets"][1]) - int(v["data_offsets"][0]) for v in tensors.values())
    return total, ", ".join(f"{k} shape {tuple(v['shape'])} {v['dtype']}" for k, v in tensors.items())


def _tensor_entries(path: Path, header: object) -> dict[str, dict]:
    """The tensors a .safetensors header declares, each checked for the format's fields: a header of
    another shape said "'list' object has no attribute 'items'"."""
    expected = 'a JSON object of NAME: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}'
    if not isinstance(header, dict):
        raise OpbenchError(f"{path}: malformed .safetensors header: a JSON {type(header).__name__}, not {expected}")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    for name, entry in tensors.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and all(isinstance(d, int) and d >= 0 for d in entry["shape"])
            and isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and o >= 0 for o in offsets)
        ):
            raise OpbenchError(
                f"{path}: malformed .safetensors header: tensor {name!r} is {repr(entry)[:80]}, not {expected}"
            )
    return tensors


def _check_declared_size(path: Path, suffix: str) -> None:
    """Refuse a file whose headers declare more than MAX_FILE_BYTES of array data, reading headers only."""
    if suffix == ".npy":
        with open(path, "rb") as f:
            declared, what = _npy_bytes(f)
    elif suffix == ".npz" or (suffix == ".pt" and zipfile.is_zipfile(path)):
        declared, what = _zip_bytes(path, npz=suffix == ".npz")
    elif suffix == ".safetensors":
        declared, what = _safetensors_bytes(path)
    else:  # torch's legacy (non-zip) format: its data is the file
        declared, what = path.stat().st_size, "legacy torch file"
    if declared > MAX_FILE_BYTES:
        raise OpbenchError(
            f"{path}: declares {byte_size(declared)} of array data ({what}), more than the {byte_size(MAX_FILE_BYTES)} "
            "opbench check reads from one file; nothing was loaded (check a slice of it)"
        )
    check_memory(declared * ARRAY_MEMORY_FACTOR, f"{path}: its {byte_size(declared)} of array data ({what})")


def check_memory(needed: int, what: str, fraction: float | None = None) -> None:
    """Refuse work that would need more than the memory budget (`fraction` of what is available
    now, half unless said), before it is loaded or allocated: past it the kernel swaps or kills
    the process (240 MB of inputs took over 4 GB)."""
    from accuracy.core.limits import MEMORY_BUDGET_FRACTION, available_memory

    share = MEMORY_BUDGET_FRACTION if fraction is None else fraction
    budget = int(available_memory() * share)
    if needed > budget:
        of = "half the memory" if share == 0.5 else "the memory" if share == 1 else f"{share:.0%} of the memory"
        raise OpbenchError(
            f"{what} need about {byte_size(needed)} of memory to judge, more than the budget of {byte_size(budget)} "
            f"({of} available now); nothing was judged: give smaller arrays"
        )


def byte_size(n: int) -> str:
    """n bytes in GiB, MiB or KiB, whichever reads best."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.3g} GiB"
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n / (1 << 10):.3g} KiB"


def _load(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    suffix = path.suffix.lower()
    if not path.is_file():  # first: a directory has no suffix, and was "unknown file type (none)"
        raise OpbenchError(f"{path}: {not_a_file(path)}")
    if suffix not in READABLE:
        raise OpbenchError(f"{path}: unknown file type {suffix or '(none)'}; use {', '.join(READABLE)}")
    try:
        if suffix == ".npy" and _first_bytes(path) != NPY_MAGIC:  # np.load would guess "pickled data"
            raise OpbenchError(f"{path}: not a .npy file (it does not start with numpy's magic bytes)")
        _check_declared_size(path, suffix)
        if suffix == ".pt":
            return _load_pt(path)
        if suffix == ".safetensors":
            return _load_safetensors(path)
        loaded = np.load(path, allow_pickle=False)  # a pickled object array could run code
        if suffix == ".npz":
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return loaded
    except OpbenchError:
        raise
    except Exception as exc:
        raise OpbenchError(f"{path}: cannot read it as {suffix}: {first_line(exc)}") from None


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
    if no_parent(path):
        raise OpbenchError(f"{path}: {no_parent(path)}")
    if suffix == ".npz":
        if any(a.dtype == ml_dtypes.bfloat16 for a in arrays.values()):
            raise OpbenchError(f"{path}: the .npy format has no bfloat16; save to a .safetensors file")
        # to a handle: given a name, np.savez appends .npz to any other spelling (.NPZ)
        write_atomic(path, lambda handle: np.savez(handle, **arrays), replace=force)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
    else:
        from safetensors.numpy import save

        write_atomic(path, save({k: np.ascontiguousarray(v) for k, v in arrays.items()}), replace=force)
    return path
