"""`opbench generate`: a port's greedy text against the float64 reference's, each other token a
rounding tie or not, and the first step beyond rounding located by the layer sweep."""

from __future__ import annotations

import contextlib
import sys

from accuracy.cli.arguments import add_command, add_json, labelled_file
from accuracy.core.errors import OpbenchError
from accuracy.core.json_output import dumps


def register(sub) -> None:
    p = add_command(
        sub,
        "generate",
        run,
        help="greedy decoding on the float64 reference and each port: is each other token a rounding tie?",
        description="Decode greedily with a causal language model (a factory MODULE:FUNCTION) in float64, and "
        "teacher-force each port on its tokens; judge each step's logits by the typical tier, call each other "
        "token a tie (the reference's margin within the port's rounding band) or not rounding, and locate the "
        "first step beyond rounding with the layer sweep of opbench model. "
        "Exit status: 0 every step within rounding and every other token a tie, 1 otherwise, 2 bad input.",
    )
    p.add_argument("factory", metavar="MODULE:FUNCTION", help="a function returning the causal language model")
    p.add_argument(
        "--inputs", required=True, metavar="IDS", help="the prompt: token ids (3,17,42) or a file holding input_ids"
    )
    p.add_argument("--steps", required=True, type=int, metavar="N", help="how many tokens to generate")
    p.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="NAME",
        help="a port (repeatable): float32, bfloat16, float16, threads:N, cache (a DynamicCache), onnxruntime, "
        "onnxruntime-cache (past key/values) (default: float32, bfloat16)",
    )
    p.add_argument(
        "--port-model",
        action="append",
        default=[],
        metavar="LABEL=MODULE:FUNCTION",
        help="a hand port in PyTorch (repeatable): FUNCTION(a copy of the reference model) returns a module "
        "called as the reference is",
    )
    p.add_argument(
        "--logits",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="a runtime's logits (repeatable): .npz or .safetensors with logits [steps, vocab] and optionally "
        "tokens [steps] (docs/generation.md)",
    )
    p.add_argument(
        "--no-sweep", action="store_true", help="do not run the layer sweep on the first step beyond rounding"
    )
    add_json(p)


def run(args) -> int:
    models = dict(labelled_file("--port-model", a, "mine=myport:build") for a in args.port_model)
    files = dict(labelled_file("--logits", a, "llamacpp=logits.npz") for a in args.logits)
    if len(models) != len(args.port_model) or len(files) != len(args.logits):
        raise OpbenchError("two --port-model (or --logits) arguments share a label; give each its own")
    from accuracy.workflows.model.generation import run_generate  # torch: only when it runs

    with contextlib.redirect_stdout(sys.stderr):  # the user's code may print: stdout is the report
        report = run_generate(args.factory, args.inputs, args.steps, args.port, models, files, not args.no_sweep)
    print(dumps(report.as_dict()) if args.json else "\n".join(report.answers()))
    return 0 if report.within_rounding else 1
