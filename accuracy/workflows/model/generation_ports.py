"""The ports `opbench generate` decodes with: each gives its logits at every step of the
reference's greedy text, teacher-forced on the reference's tokens (one flip does not hide the
steps after it).

- PyTorch (`float32`, `bfloat16`, `float16`, `threads:N`) and a hand port (`--port-model`): one
  forward per step on the tokens so far, the last position's logits, as a decoder without a
  cache computes them;
- ONNX Runtime: the model exported once on the whole teacher-forced text (a fixed length) and run
  once: the causal mask makes row t its logits on the first t tokens; or, `onnxruntime-cache`,
  exported with past key/values and decoding one token a step (generation_onnx_cache);
- a runtime's file (`--logits`): the logits and tokens it wrote, compared up to the step after its
  own text leaves the reference's (later rows are logits on another text).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accuracy.backends import get_backend
from accuracy.backends.pytorch import tensor_to_numpy
from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.core.errors import OpbenchError, first_line
from accuracy.core.loading import load_function
from accuracy.workflows.array_files import read_arrays
from accuracy.workflows.model.generation_cache import cached_rows, takes_cache
from accuracy.workflows.model.generation_onnx_cache import export_cached, onnx_cached_rows, why_not
from accuracy.workflows.model.trace import first_tensor

TORCH_DTYPES = ("float32", "bfloat16", "float16")
ONNX_CACHE = "onnxruntime-cache"
LOGITS_KEYS = ("logits", "tokens")
LOGITS_FORMAT = (
    "a .npz or .safetensors file holding `logits` [steps, vocab] (float32, float16 or bfloat16: the logits at "
    "each step) and optionally `tokens` [steps] (integers: the token the runtime took after each step)"
)


class Logits(torch.nn.Module):
    """A causal language model as a function of its token ids: the logits [1, length, vocab],
    caches off (a cache is state a rerun would change)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model
        self.cached = "use_cache" in inspect.signature(model.forward).parameters

    def forward(self, input_ids: Any) -> Any:
        out = self.model(input_ids=input_ids, use_cache=False) if self.cached else self.model(input_ids)
        return first_tensor(out)


@dataclass
class GenPort:
    """A port of `opbench generate`: its label, what runs, its format, and what the layer sweep
    (`opbench model`) runs for it: a `--port` name, a hand port's module, or None (a file)."""

    name: str
    description: str
    fmt: FloatFormat
    sweep_port: str | None = None
    module: Any = None  # a hand port's module (its layers' activations go to the sweep)
    threads: int | None = None
    tokens: np.ndarray | None = None  # a runtime's own tokens (--logits), where it wrote them
    rows: np.ndarray | None = None  # a runtime's logits (--logits)
    onnx: bool = False
    cached: bool = False  # decodes with a KV cache (generation_cache), its `bug` injected where given
    bug: str | None = None

    def step_logits(self, text: np.ndarray, prompt: int, steps: int) -> np.ndarray:
        """The logits [steps, vocab] at each step of `text` (the prompt and the reference's tokens)."""
        if self.rows is not None:
            return self.rows
        if self.onnx and self.cached:
            session, model = self.module
            return onnx_cached_rows(session, model, text, prompt, steps, self.bug)
        if self.onnx:
            return _onnx_rows(self.module, text[:, : prompt + steps - 1], prompt)
        if self.cached:
            return cached_rows(self.module.model, text, prompt, steps, self.bug)
        stack = get_backend("torch").thread_limit(self.threads) if self.threads else contextlib.nullcontext()
        rows = []
        with stack, torch.no_grad():
            for step in range(steps):
                ids = torch.from_numpy(np.ascontiguousarray(text[:, : prompt + step]))
                out = self.module(ids)
                rows.append(tensor_to_numpy(out[0, -1]))
        return np.stack(rows)


def _onnx_rows(session_and_names: Any, ids: np.ndarray, prompt: int) -> np.ndarray:
    from accuracy.workflows.model import onnx_graph

    session, name = session_and_names
    (out,) = onnx_graph.run(session, {name: ids}).values()
    return np.asarray(out)[0, prompt - 1 :]


def cache_port(model: Any, bug: str | None = None) -> GenPort:
    """`cache`: the reference's own modules in float32, decoding with transformers' DynamicCache
    (the prompt prefilled, then one token a step); `bug`: one of generation_cache.CACHE_BUGS."""
    if not takes_cache(model):
        raise OpbenchError(
            "--port cache: the model's forward takes no past_key_values, position_ids and cache_position"
        )
    name = "cache" if bug is None else f"cache ({bug})"
    description = "PyTorch float32 decoding with transformers' DynamicCache" + (f", {bug}" if bug else "")
    port = Logits(copy.deepcopy(model).float())
    return GenPort(name, description, FORMATS["float32"], None, port, cached=True, bug=bug)


def torch_port(name: str, model: Any) -> GenPort:
    """`float32`, `bfloat16`, `float16` or `threads:N`: the reference's own modules in PyTorch."""
    if name == "cache":
        return cache_port(model)
    if name in TORCH_DTYPES:
        port = Logits(copy.deepcopy(model).to(getattr(torch, name)))
        sweep = name if name != "float32" else f"threads:{torch.get_num_threads()}"
        return GenPort(name, f"PyTorch, weights and activations in {name}", FORMATS[name], sweep, port)
    count = name.partition(":")[2]
    if not (name.startswith("threads:") and count.isdigit() and int(count) > 0):
        raise OpbenchError(
            f"--port {name}: opbench generate takes {', '.join(TORCH_DTYPES)}, threads:N, cache, onnxruntime "
            f"and {ONNX_CACHE}"
        )
    port = Logits(copy.deepcopy(model).float())
    return GenPort(name, f"PyTorch on {count} intra-op threads", FORMATS["float32"], name, port, int(count))


def onnx_port(model: Any, text: np.ndarray, prompt: int, steps: int) -> GenPort | str:
    """ONNX Runtime (graph optimizations on) on the model exported at the teacher-forced text's
    length; or why it is absent (a decoder that does not export)."""
    from accuracy.workflows.model import onnx_graph
    from accuracy.workflows.model.export_cache import cached_export

    ids = np.ascontiguousarray(text[:, : prompt + steps - 1])
    try:
        exported = cached_export(onnx_graph.export, Logits(copy.deepcopy(model).float()), {"input_ids": ids})
        session = onnx_graph.session(exported, True)
    except OpbenchError as exc:
        return str(exc)
    except Exception as exc:
        return f"it cannot be built for this model: {first_line(exc, typed=True)}"
    name = session.get_inputs()[0].name
    description = "ONNX Runtime (torch.onnx.export at the text's length), graph optimizations on"
    return GenPort("onnxruntime", description, FORMATS["float32"], "onnxruntime", (session, name), onnx=True)


def onnx_cache_port(model: Any, bug: str | None = None) -> GenPort | str:
    """`onnxruntime-cache`: ONNX Runtime (graph optimizations on) decoding with past key/values,
    the graph exported once (generation_onnx_cache), `bug` its runtime's bookkeeping wrong so
    (generation_cache.CACHE_BUGS); or why it is absent."""
    from accuracy.workflows.model import onnx_graph
    from accuracy.workflows.model.export_cache import cached_export

    if not takes_cache(model):
        return "the model's forward takes no past_key_values, position_ids and cache_position"
    try:
        exported = cached_export(export_cached, model, {"input_ids": np.zeros((1, 1), np.int64)})
        session = onnx_graph.session(exported, True)
    except Exception as exc:
        return why_not(exc)
    description = "ONNX Runtime decoding with past key/values (the dynamo exporter), graph optimizations on"
    name = ONNX_CACHE if bug is None else f"{ONNX_CACHE} ({bug})"
    return GenPort(name, description, FORMATS["float32"], None, (session, model), onnx=True, cached=True, bug=bug)


def hand_port(label: str, spec: str, model: Any) -> GenPort:
    """`--port-model LABEL=MODULE:FUNCTION`: FUNCTION(a copy of the reference) returns the port, a
    torch module called as the reference is; its format is its logits' dtype."""
    function = load_function(spec, "--port-model")
    try:
        module = function(copy.deepcopy(model))
    except Exception as exc:
        raise OpbenchError(f"--port-model {label}={spec}: it failed: {first_line(exc, typed=True)}") from None
    if not isinstance(module, torch.nn.Module):
        raise OpbenchError(f"--port-model {label}={spec}: it returned a {type(module).__name__}, not a torch.nn.Module")
    module.eval()
    port = Logits(module)
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    name = str(dtype).removeprefix("torch.")
    if name not in FORMATS:
        raise OpbenchError(f"--port-model {label}={spec}: its parameters are {name}, not a float format opbench judges")
    return GenPort(label, f"a hand port in PyTorch ({spec})", FORMATS[name], None, port)


def logits_arrays(label: str, path: str) -> dict[str, np.ndarray]:
    """`--logits LABEL=FILE`'s arrays, read before the model is built: a file that is not
    LOGITS_FORMAT is one line at once, not after a long build."""
    where = f"--logits {label}={path}"
    if Path(path).suffix.lower() not in (".npz", ".safetensors"):
        raise OpbenchError(f"{where}: expected {LOGITS_FORMAT}")
    arrays = read_arrays(path)
    extra = sorted(set(arrays) - set(LOGITS_KEYS))
    if "logits" not in arrays or extra:
        held = ", ".join(sorted(arrays)) or "nothing"
        raise OpbenchError(f"{where}: holds {held}; expected {LOGITS_FORMAT}")
    return arrays


def logits_port(label: str, path: str, arrays: dict[str, np.ndarray], steps: int, vocab: int) -> GenPort:
    """The port of a --logits file's `arrays` (logits_arrays), held to --steps and the model's
    vocabulary: anything else is one line."""
    where = f"--logits {label}={path}"
    logits, tokens = np.asarray(arrays["logits"]), arrays.get("tokens")
    dtype = "bfloat16" if logits.dtype.name == "bfloat16" else logits.dtype.name
    if dtype not in ("float32", "float16", "bfloat16", "float64") or logits.shape != (steps, vocab):
        raise OpbenchError(
            f"{where}: logits is {dtype} {list(logits.shape)}; expected float [{steps}, {vocab}] "
            f"(--steps {steps}, the model's vocabulary {vocab})"
        )
    if tokens is not None:
        tokens = np.asarray(tokens)
        if tokens.dtype.kind not in "iu" or tokens.shape != (steps,) or tokens.min() < 0 or tokens.max() >= vocab:
            raise OpbenchError(
                f"{where}: tokens is {tokens.dtype} {list(tokens.shape)}; expected integers [{steps}] below {vocab}"
            )
    description = f"a runtime's logits file ({Path(path).name})"
    return GenPort(label, description, FORMATS[dtype], None, tokens=tokens, rows=logits)
