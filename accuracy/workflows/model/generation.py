"""`opbench generate`: is a port's greedy text the reference's, and where it is not, is the first
other token a rounding tie or a bug?

The float64 model decodes greedily; each port is teacher-forced on its tokens
(generation_ports). Each step's logits are judged by the typical tier of the model as a function
of its tokens (the whole model one unit, as `check --fn` judges a function), derived once per
format on the whole text: the causal mask makes its row t the logits of step t. Where a port's
argmax is another token, the reference's margin between its token and the port's is compared
with the port's rounding band there, the typical thresholds of those two logits summed: within
it, a correct port of that format may pick either (a tie); beyond, it does not (not rounding).
The first step whose logits are not within rounding is handed to the layer sweep
(`opbench model` on that step's tokens), which names the module.
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accuracy.backends import get_backend
from accuracy.core.dtypes import FORMATS, FloatFormat
from accuracy.core.errors import OpbenchError
from accuracy.core.json_output import json_ready
from accuracy.judge.verdicts import NOT_COMPARED, UNDETERMINED, Evidence, FunctionSubject
from accuracy.workflows.array_files import read_arrays
from accuracy.workflows.model.activations_file import activations, save_activations
from accuracy.workflows.model.answer import INDENTED, cause_words, clip, is_flagged, number
from accuracy.workflows.model.generation_cache import cache_cause
from accuracy.workflows.model.generation_ports import (
    ONNX_CACHE,
    GenPort,
    Logits,
    hand_port,
    logits_arrays,
    logits_port,
    onnx_cache_port,
    onnx_port,
    torch_port,
)
from accuracy.workflows.model.rows import AbsentPort
from accuracy.workflows.model.sweep import JUDGE_THREADS, ModelRun
from accuracy.workflows.model.trace import LayerCall, float64_throughout, load_model, record
from accuracy.workflows.model.unit import CauseFinding, Unit
from accuracy.workflows.model.units import _evidence

# ONNX Runtime on request: exporting a decoder takes longer than judging every step (45 s of 190 at load 9)
DEFAULT_PORTS = ("float32", "bfloat16")
MOST_STEPS = 4096
TIE, NOT_ROUNDING = "a tie", "not rounding"


def prompt_ids(text: str) -> np.ndarray:
    """The prompt [1, length]: token ids as `3,17,42`, or a file (.npz, .safetensors) holding `input_ids`."""
    if Path(text).exists():
        arrays = read_arrays(text)
        if "input_ids" not in arrays:
            raise OpbenchError(f"--inputs {text}: holds {', '.join(sorted(arrays))}; expected input_ids")
        ids = np.asarray(arrays["input_ids"])
    else:
        try:
            ids = np.array([int(t) for t in text.split(",")], dtype=np.int64)
        except ValueError:
            raise OpbenchError(f"--inputs {text!r}: expected token ids (3,17,42) or a file holding input_ids") from None
    if ids.dtype.kind not in "iu" or ids.size == 0 or ids.ndim > 2 or (ids.ndim == 2 and ids.shape[0] != 1):
        raise OpbenchError(f"--inputs {text}: expected one sequence of integer token ids, got {ids.dtype} {ids.shape}")
    if ids.min() < 0:
        raise OpbenchError(f"--inputs {text}: token ids are not negative; it holds {int(ids.min())}")
    return ids.reshape(1, -1).astype(np.int64)


def _forward64(model64: Logits, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad(), float64_throughout():
        return model64(torch.from_numpy(np.ascontiguousarray(ids))).numpy()


def reference_text(model: Any, prompt: np.ndarray, steps: int) -> tuple[np.ndarray, int]:
    """The float64 model's greedy text (the prompt and `steps` tokens) and its vocabulary."""
    model64 = Logits(copy.deepcopy(model).double())
    text = prompt
    try:
        for _ in range(steps):
            logits = _forward64(model64, text)
            text = np.concatenate([text, [[int(np.argmax(logits[0, -1]))]]], axis=1)
    except Exception as exc:
        raise OpbenchError(
            f"the model cannot decode the prompt ({prompt.shape[1]} tokens): {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from None
    if logits.ndim != 3 or logits.shape[0] != 1:
        raise OpbenchError(f"the model's logits have shape {list(logits.shape)}; expected [1, length, vocab]")
    return text, int(logits.shape[-1])


@dataclass
class StepEvidence:
    """The typical tier of the logits at each step, for one format: (exact, tier) per row."""

    evidence: Evidence
    prompt: int

    def at(self, step: int) -> Evidence:
        row = self.prompt - 1 + step

        def pick(a: np.ndarray) -> np.ndarray:
            return a[0, row]

        subject = self.evidence.op
        model = subject.model
        if model is not None:
            worst = None if model.worst_case is None else pick(model.worst_case)
            model = replace(model, scale=pick(model.scale), threshold=pick(model.threshold), worst_case=worst)
        return Evidence(
            FunctionSubject(subject.name, model, subject.basis), {}, self.evidence.fmt, self.evidence.exact.map(pick)
        )


def step_evidence(
    model: Any, text: np.ndarray, prompt: int, steps: int, fmt: FloatFormat, judged: list
) -> StepEvidence:
    """The typical tier of the model's logits in `fmt` on the whole teacher-forced text."""
    ids = torch.from_numpy(np.ascontiguousarray(text[:, : prompt + steps - 1]))
    unit = Unit([LayerCall("logits", "", Logits(model), [ids], None)])
    full = [np.zeros((1, ids.shape[1], rows.shape[1])) for rows in judged]
    for whole, rows in zip(full, judged, strict=True):
        whole[0, prompt - 1 :] = np.asarray(rows, dtype=np.float64)
    evidence, _, _, _ = _evidence(unit, [ids], fmt, None, full)
    return StepEvidence(evidence, prompt)


def judged_steps(port: GenPort, rows: np.ndarray, reference: np.ndarray, tiers: StepEvidence) -> list[dict]:
    """Each step's logits judged, and where the port's argmax is another token, a tie or not."""
    out = []
    own = port.tokens
    for step, (logits, wanted) in enumerate(zip(rows, reference, strict=True)):
        if own is not None and step > 0 and not np.array_equal(own[:step], reference[:step]):
            out.append({"step": step, "verdict": NOT_COMPARED, "reason": "the runtime's own text left the reference's"})
            continue
        evidence = tiers.at(step)
        judgement = evidence.judge(np.asarray(logits, dtype=np.float64))
        token = int(own[step]) if own is not None else int(np.argmax(np.asarray(logits, dtype=np.float64)))
        row: dict = {
            "step": step,
            "token": token,
            "reference_token": int(wanted),
            "verdict": judgement.verdict,
            "typical_ratio": judgement.typical_ratio,
            "reason": judgement.reason,
        }
        if token != wanted:
            row |= flip(evidence, int(wanted), token, step)
        out.append(row)
    return out


def flip(evidence: Evidence, wanted: int, token: int, step: int) -> dict:
    """Another token at a step: the reference's margin between its token and the port's, against
    the band within which a correct port of this format may order the two otherwise."""
    exact = evidence.exact.hi
    margin = float(exact[wanted] - exact[token])
    model = evidence.op.model
    if model is None:
        return {"margin": margin, "band": None, "flip": UNDETERMINED, "flip_words": "no typical tier models it"}
    band = float(model.threshold[wanted] + model.threshold[token])
    if margin <= band:
        return {
            "margin": margin,
            "band": band,
            "flip": TIE,
            "flip_words": f"a tie: margin {margin:.2g}, band {band:.2g}",
        }
    words = f"not rounding: margin {margin:.2g} at step {step} (band {band:.2g})"
    return {"margin": margin, "band": band, "flip": NOT_ROUNDING, "flip_words": words}


def _ports(
    model: Any, names: list[str], port_models: dict[str, str], logits: list[GenPort], text, prompt, steps
) -> tuple[list[GenPort], list[AbsentPort]]:
    """The ports to decode with (what the user brought checked first: its problems are bad
    input; `logits`: the --logits files' ports), and the built-in ports absent here, with why."""
    brought = list(port_models) + [p.name for p in logits]
    if len(set(brought)) != len(brought) or set(brought) & set(names):
        raise OpbenchError("a --port-model or --logits label is used twice (or is a --port): give each its own")
    ports = logits + [hand_port(label, spec, model) for label, spec in port_models.items()]
    absent: list[AbsentPort] = []
    for name in dict.fromkeys(names):
        if name in ("onnxruntime", ONNX_CACHE):
            built = onnx_port(model, text, prompt, steps) if name == "onnxruntime" else onnx_cache_port(model)
            if isinstance(built, str):
                absent.append(AbsentPort(name, built))
                continue
            ports.append(built)
        else:
            ports.append(torch_port(name, model))
    return ports, absent


def run_generate(
    spec: str,
    inputs: str,
    steps: int,
    ports: list[str] | None = None,
    port_models: dict[str, str] | None = None,
    logits_files: dict[str, str] | None = None,
    sweep: bool = True,
) -> GenerateReport:
    """The report `opbench generate` prints: the reference's greedy text and each port's steps."""
    if not 1 <= steps <= MOST_STEPS:
        raise OpbenchError(f"--steps {steps}: give 1 to {MOST_STEPS}")
    files = logits_files or {}
    brought = {label: logits_arrays(label, path) for label, path in files.items()}
    model = load_model(spec)
    prompt = prompt_ids(inputs)
    with get_backend("torch").thread_limit(JUDGE_THREADS):  # as the layer sweep judges (sweep.py)
        text, vocab = reference_text(model, prompt, steps)
    length = prompt.shape[1]
    names = list(ports or ([] if port_models or logits_files else DEFAULT_PORTS))
    logits = [logits_port(label, path, brought[label], steps, vocab) for label, path in files.items()]
    built, absent = _ports(model, names, port_models or {}, logits, text, length, steps)
    rows = {}
    for port in built:
        try:
            rows[port.name] = port.step_logits(text, length, steps)
        except Exception as exc:
            if port.rows is not None or port.sweep_port is None:
                raise OpbenchError(f"{port.name}: it failed on the text: {type(exc).__name__}: {exc}") from None
            absent.append(AbsentPort(port.name, f"the port failed: {type(exc).__name__}: {exc}"))
    built = [p for p in built if p.name in rows]
    results = judge_ports(spec, model, text, length, [(p, rows[p.name]) for p in built], sweep)
    return GenerateReport(spec, prompt[0].tolist(), steps, text[0, length:].tolist(), results, absent)


def judge_ports(spec: str, model: Any, text: np.ndarray, length: int, runs: list, sweep: bool = True) -> list[dict]:
    """Each port's result from its logits at every step (`runs`: (port, rows)): its steps judged,
    the cause of its first step beyond rounding in the model's top-level forward or its cache,
    and the layer sweep there."""
    steps = text.shape[1] - length
    built, rows = [p for p, _ in runs], {p.name: r for p, r in runs}
    reference = text[0, length:]
    results = []
    tiers: dict[str, StepEvidence] = {}
    # one intra-op thread, as the layer sweep judges: a tiny model's forward on two threads of a
    # loaded machine took 20 times as long (0.41 s against 0.024 s at load 8)
    with get_backend("torch").thread_limit(JUDGE_THREADS):
        for fmt in dict.fromkeys(p.fmt.name for p in built):
            outputs = [rows[p.name] for p in built if p.fmt.name == fmt]
            tiers[fmt] = step_evidence(model, text, length, steps, FORMATS[fmt], outputs)
    for port in built:
        result = port_summary(port, judged_steps(port, rows[port.name], reference, tiers[port.fmt.name]))
        first = result["first_beyond"]
        if first is not None:
            tier = tiers[port.fmt.name]
            flagged = [s["step"] for s in result["steps"] if is_flagged(s["verdict"])]
            with get_backend("torch").thread_limit(JUDGE_THREADS):
                at, row = tier.at(first), rows[port.name][first]
                result["end_to_end_cause"] = (
                    final_cause(model, at, row)
                    or scale_cause(model, at, row, text[:, : length + first])
                    or cache_cause(model, rows[port.name], tier, flagged, text, length)
                )
        if sweep and first is not None and not port.cached:  # a cached port's layers are the model's
            result["layer_sweep"] = layer_sweep(spec, port, text[:, : length + first])
        results.append(result)
    return results


def final_cause(model: Any, evidence: Evidence, row: np.ndarray) -> dict | None:
    """The cause of a step's logits in the model's own top-level forward, which no unit covers:
    its final-logit soft-cap dropped or at another cap (fitted), where that puts the port's
    logits within their typical thresholds; None where neither does."""
    from scipy.optimize import minimize_scalar

    tier = evidence.op.model
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if tier is None:
        return None
    exact, port = evidence.exact.hi, np.asarray(row, dtype=np.float64)
    raw = cap * np.arctanh(np.clip(exact / cap, -1 + 1e-16, 1 - 1e-16)) if cap else exact

    def capped(log_cap: float) -> np.ndarray:
        return 10.0**log_cap * np.tanh(raw / 10.0**log_cap)

    fit = minimize_scalar(lambda c: float(np.linalg.norm(capped(c) - port)), bounds=(0.0, 4.0), method="bounded")
    fitted = float(f"{10.0**fit.x:.2g}")
    candidates = [("final soft-cap", capped(float(np.log10(fitted))), {"cap": fitted})]
    own = f"this model caps at {cap:g}" if cap else "this model has none"
    words = [f"the final logits soft-capped at {fitted:.3g} (tanh(z/c) c); {own}"]
    if cap:
        candidates.insert(0, ("final soft-cap dropped", raw, {}))
        words.insert(0, f"no final-logit soft-cap: the logits not capped at {cap:g} (tanh(z/c) c)")
    for (name, changed, parameters), said in zip(candidates, words, strict=True):
        ratio = tier.ratio(np.abs(port - changed))
        if ratio <= 1:
            return {"name": name, "words": said, "parameters": parameters, "ratio": ratio, "explains": True}
    return None


SCALE_FORMATS = ("bfloat16", "float16")


def _first_layer(model: Any) -> Any:
    """The first decoder layer of a transformers causal LM (or base model), or None."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    return layers[0] if isinstance(layers, torch.nn.ModuleList) and len(layers) else None


def _scaled_logits(model64: Any, ids: np.ndarray, factor: float | None) -> tuple[np.ndarray, float]:
    """The float64 model's last logits with the first layer's input times `factor` (None: as it
    is), and the scale the forward put between the embedding's output and that input."""
    seen: dict[str, Any] = {}

    def scaled(_: Any, args: tuple) -> tuple:
        seen["input"] = args[0]
        return args if factor is None else (args[0] * factor, *args[1:])

    handles = [
        model64.get_input_embeddings().register_forward_hook(lambda m, a, out: seen.__setitem__("embedded", out)),
        _first_layer(model64).register_forward_pre_hook(scaled),
    ]
    try:
        logits = _forward64(Logits(model64), ids)[0, -1]
    finally:
        for handle in handles:
            handle.remove()
    return logits, (seen["input"].norm() / seen["embedded"].norm()).item()


def scale_cause(model: Any, evidence: Evidence, row: np.ndarray, ids: np.ndarray) -> dict | None:
    """The cause of a step's logits in the embedding scale a model's own forward applies (Gemma 2's
    normalizer sqrt(hidden), which no module holds): dropped, or computed in bfloat16 or float16
    (transformers PR #29402: 55.5 for sqrt(3072)), where that puts the port's logits within their
    typical thresholds; None where neither does or the forward scales by no sqrt(hidden)."""
    tier = evidence.op.model
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    if tier is None or hidden is None or _first_layer(model) is None or not hasattr(model, "get_input_embeddings"):
        return None
    model64 = copy.deepcopy(model).double()
    _, scale = _scaled_logits(model64, ids, None)
    if abs(scale - hidden**0.5) > 1e-6 * scale:
        return None
    candidates: list[tuple[str, float, dict, str]] = [
        ("embedding scale dropped", 1 / scale, {}, f"no embedding scale: not multiplied by {scale:.6g}")
    ]
    for dtype in SCALE_FORMATS:
        rounded = float(torch.tensor(scale, dtype=torch.float64).to(getattr(torch, dtype)))
        words = f"the embedding scale {scale:.6g} (sqrt(hidden)) computed in {dtype}: {rounded:.6g}"
        candidates.append(("embedding scale format", rounded / scale, {"format": dtype}, words))
    for name, factor, parameters, words in candidates:
        ratio = tier.ratio(np.abs(np.asarray(row, dtype=np.float64) - _scaled_logits(model64, ids, factor)[0]))
        if ratio <= 1:
            return {"name": name, "words": words, "parameters": parameters, "ratio": ratio, "explains": True}
    return None


def port_summary(port: GenPort, judged: list[dict]) -> dict:
    """A port's steps, the other tokens it picks, and the first step not within rounding."""
    compared = [s for s in judged if s["verdict"] != NOT_COMPARED]
    flips = [s for s in compared if "flip" in s]
    flagged = [s for s in compared if is_flagged(s["verdict"])]
    return {
        "port": port.name,
        "description": port.description,
        "dtype": port.fmt.name,
        "steps": judged,
        "compared": len(compared),
        "flagged": len(flagged),
        "first_beyond": flagged[0]["step"] if flagged else None,
        "flips": len(flips),
        "ties": sum(s["flip"] == TIE for s in flips),
        "first_flip": flips[0]["step"] if flips else None,
        "first_not_rounding": next((s["step"] for s in flips if s["flip"] != TIE), None),
        "worst_ratio": max(
            (s["typical_ratio"] for s in compared if s["typical_ratio"] == s["typical_ratio"]), default=None
        ),
        "layer_sweep": None,
        "end_to_end_cause": None,
    }


def layer_sweep(spec: str, port: GenPort, ids: np.ndarray) -> dict:
    """`opbench model` on the tokens of the first step not within rounding: the port's first
    module not within rounding there, its cause, and its end-to-end verdict."""
    from accuracy.workflows.model.sweep import run_model

    located: dict = {"tokens": int(ids.shape[1])}
    if port.sweep_port is None and port.rows is not None:
        return located | {"not_run": "a logits file has no layers: give the runtime's activations to opbench model"}
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        files = {}
        if port.sweep_port is None:  # a hand port: its layers' activations, as a runtime's file
            calls, out = record(port.module.model, {"input_ids": ids})
            path = Path(folder) / "port.safetensors"
            save_activations(path, activations(calls, out))
            files[port.name] = str(path)
        try:
            report = run_model(ModelRun(spec, {"input_ids": ids}, [port.sweep_port] if port.sweep_port else [], files))
        except OpbenchError as exc:
            return located | {"not_run": str(exc)}
    if not report.ports:
        return located | {"not_run": "; ".join(a.reason for a in report.absent) or "the port did not run"}
    (result,) = report.ports
    first = next((r for r in result.layers if r.path == result.first_not_within), None)
    return located | {
        "first_not_within": result.first_not_within,
        "op": first.op if first else None,
        "cause": first.cause if first else None,
        "end_to_end": result.end_to_end,
    }


@dataclass
class GenerateReport:
    model: str
    prompt: list[int]
    steps: int
    tokens: list[int]  # the float64 reference's greedy tokens
    ports: list[dict]
    absent: list[AbsentPort] = field(default_factory=list)

    @property
    def within_rounding(self) -> bool:
        """Exit 0 only where some port ran and every compared step of every port is within
        rounding, each other token a tie."""
        return bool(self.ports) and all(
            p["flagged"] == 0 and p["first_not_rounding"] is None and p["compared"] > 0 for p in self.ports
        )

    def as_dict(self) -> dict:
        return json_ready(
            {
                "model": self.model,
                "prompt": self.prompt,
                "steps": self.steps,
                "reference_tokens": self.tokens,
                "ports": self.ports,
                "absent_ports": self.absent,
            }
        )

    def answers(self) -> list[str]:
        """Three lines per port (answer.py's style), then the absent ports."""
        lines = [
            clip(f"reference (float64): {self.steps} greedy tokens after {len(self.prompt)}: {_tokens(self.tokens)}")
        ]
        for p in self.ports:
            lines += port_lines(p, self.steps)
        lines += [clip(f"{a.port}: absent: {a.reason}") for a in self.absent]
        return lines


def _tokens(tokens: list[int]) -> str:
    return " ".join(map(str, tokens[:16])) + (" ..." if len(tokens) > 16 else "")


def port_lines(p: dict, steps: int) -> list[str]:
    """A port's three lines: its verdict, its first other token, where it goes wrong and why."""
    label = f"{p['port']} [{p['dtype']}]"
    compared = f"{p['compared']} of {steps} steps compared" if p["compared"] != steps else f"{steps} steps"
    others = (
        f"another token at {p['flips']} of {p['compared']} steps"
        if p["flips"]
        else "its greedy text is the reference's"
    )
    if p["flagged"] or p["first_not_rounding"] is not None:
        verdict = f"{label}: NOT within rounding: {p['flagged']} of {p['compared']} steps' logits flagged; {others}"
    elif p["flips"]:
        verdict = f"{label}: every step's logits within rounding ({compared}); {others}, each a tie"
    else:
        verdict = f"{label}: every step's logits within rounding ({compared}), and {others}"
    first = next((s for s in p["steps"] if s["step"] == p["first_not_rounding"]), None) or next(
        (s for s in p["steps"] if s["step"] == p["first_flip"]), None
    )
    if first is not None:
        flip_line = (
            f"step {first['step']}: token {first['token']} for {first['reference_token']}: {first['flip_words']}"
        )
    else:
        flip_line = f"no step picks another token; the nearest step at {number(p['worst_ratio'])}x its threshold"
    return [clip(verdict), "  " + clip(flip_line, INDENTED), "  " + clip(where_line(p), INDENTED)]


def where_line(p: dict) -> str:
    """Where the port first goes beyond rounding, by the layer sweep on that step's tokens."""
    step = p["first_beyond"]
    if step is None:
        return "nothing to look into; --json gives every step"
    row = next(s for s in p["steps"] if s["step"] == step)
    head = f"step {step} first not within rounding ({number(row['typical_ratio'])}x)"
    sweep, found = p.get("layer_sweep"), p.get("end_to_end_cause")
    if sweep is None:
        return f"{head}: explained by {found['words']}" if found else head
    if "not_run" in sweep:
        return f"{head}; layer sweep not run: {sweep['not_run']}"
    if sweep["first_not_within"] is None:
        said = f": explained by {found['words']}" if found else ""
        return f"{head}; every layer within rounding, its top-level forward not{said}"
    where = f"{head}: {sweep['first_not_within']} ({sweep['op']})"
    named = CauseFinding.of(sweep["cause"])
    if found and not (named and named.explains):  # in a forward's own code, which no unit covers
        return f"{where}, in its own forward: explained end to end by {found['words']}"
    return f"{where}: {cause_words(sweep['cause'])}"
