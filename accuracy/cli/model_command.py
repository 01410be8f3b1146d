"""`opbench model`: which layer of a port of a whole model stops being rounding, and by how much."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from accuracy.cli.arguments import add_command, add_dask, add_json, item_progress, labelled_file, stopped_early
from accuracy.core.errors import OpbenchError, first_line, stdout_to_stderr
from accuracy.core.files import no_parent, refuse_symlink
from accuracy.core.json_output import dumps
from accuracy.workflows.model.answer import FOLD
from accuracy.workflows.model.ports import BUILT_IN, default_ports


def colour() -> bool:
    """Colour on a terminal that takes it: not with NO_COLOR set (no-color.org), TERM=dumb, or a pipe."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def register(sub) -> None:
    p = add_command(
        sub,
        "model",
        run,
        help="judge a whole model's ports layer by layer: the first layer that is not rounding",
        description="Run a PyTorch model (a factory MODULE:FUNCTION returning an nn.Module, put in eval mode) "
        "and its ports layer by layer on identical inputs; judge each layer against its exact value with the "
        "registry's bounds or check --fn's typical tier, and each port end to end. "
        "Exit status: 0 all compared layers within rounding, 1 otherwise, 2 bad input.",
    )
    p.add_argument("factory", metavar="MODULE:FUNCTION", help="a function returning the torch.nn.Module")
    p.add_argument(
        "--inputs",
        required=True,
        metavar="FILE",
        help="the model's inputs by argument name (.npz, .safetensors, .pt), or shapes to generate from the "
        "seeded PCG64 as standard normal float32, e.g. x=1x3x224x224",
    )
    p.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a port to build (repeatable): {', '.join(s.name for s in BUILT_IN)}, or one a plugin adds "
        f"(default: {', '.join(default_ports(gpu=False))}, "
        "plus cuda and cuda-tf32 where a GPU is; a CUDA port without a GPU is reported absent, never an error)",
    )
    _add_runtimes_of_their_own(p)
    _add_outputs(p)
    add_dask(p)
    p.add_argument(
        "--scheduler",
        metavar="NAME",
        help="run the work items on a scheduler a plugin adds (the opbench.schedulers entry point), by name",
    )
    add_json(p)


def _add_runtimes_of_their_own(p) -> None:
    """The ports opbench does not build: another runtime's activations or ONNX file, a Keras port,
    and the data the quantized ports calibrate on."""
    p.add_argument(
        "--activations",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="another runtime's activations file (repeatable): keys <module path>, <module path>/in0, ..., output",
    )
    p.add_argument(
        "--onnx",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="an ONNX model exported or optimized elsewhere, run by ONNX Runtime (repeatable); its values are "
        "paired with modules by the exporter's names",
    )
    p.add_argument(
        "--onnx-map",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="for --onnx LABEL: a JSON object pairing more of its values with modules (ONNX value name -> module path)",
    )
    p.add_argument(
        "--calibration",
        metavar="FILE",
        help="the arrays the quantized ports (ort-int8, ort-int8-tensor) calibrate on, by input name (.npz, "
        ".safetensors, .pt; each the input's shape or a multiple along the first axis; default: --inputs)",
    )
    p.add_argument(
        "--save-activations",
        metavar="FILE",
        help="write the reference model's activations (.safetensors or .npz) for another runtime to use",
    )
    p.add_argument(
        "--keras",
        metavar="MODULE:FUNCTION",
        help="a Keras port: a function returning (keras model, {Keras layer name: torch module path})",
    )


def _add_outputs(p) -> None:
    """What the run writes and shows, and the model's mode."""
    p.add_argument("--html", metavar="FILE", help="also write a page with a per-layer plot of the errors through depth")
    p.add_argument("--train", action="store_true", help="keep the model in train mode (default: eval mode)")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"every unit (the default shows every unit up to {FOLD}; above, the flagged ones and the top level)",
    )
    p.add_argument(
        "--only-flagged",
        action="store_true",
        help="only the flagged units and the units they run inside (says how many are hidden)",
    )
    p.add_argument(
        "--explain-verdicts",
        action="store_true",
        help="how each verdict's threshold is derived: the answer in full and each flagged unit's reason",
    )


def run(args) -> int:
    files = dict(labelled_file("--activations", a, "djl=activations_djl.safetensors") for a in args.activations)
    if len(files) != len(args.activations):
        raise OpbenchError("two --activations arguments share a label; give each its own")
    onnx = dict(labelled_file("--onnx", a, "ort=model_optimized.onnx") for a in args.onnx)
    maps = dict(labelled_file("--onnx-map", a, "ort=names.json") for a in args.onnx_map)
    if len(onnx) != len(args.onnx) or len(maps) != len(args.onnx_map):
        raise OpbenchError("two --onnx (or --onnx-map) arguments share a label; give each its own")
    unknown = sorted(set(maps) - set(onnx))
    if unknown:
        raise OpbenchError(f"--onnx-map {unknown[0]}: no --onnx {unknown[0]}=FILE to pair it with")
    if args.html:  # checked before the run: bad input writes nothing, and the run is not lost to it
        html = Path(args.html)
        refuse_symlink(html)
        if html.exists():
            raise OpbenchError(f"--html {args.html}: already exists")
        if no_parent(html):
            raise OpbenchError(f"--html {args.html}: {no_parent(html)}")
        if not os.access(html.parent, os.W_OK):
            raise OpbenchError(f"--html {args.html}: directory {html.parent} is not writable")
    if args.html and args.save_activations and Path(args.html).resolve() == Path(args.save_activations).resolve():
        raise OpbenchError(f"--html and --save-activations name the same file {args.html}: give each its own")
    from accuracy.cli.text.model import render
    from accuracy.workflows.model.sweep import ModelRun, run_model  # torch, pandas: only when it runs

    # the user's factory and forward may print, and torch's ONNX exporter dumps a graph on file
    # descriptor 1 from C++: all of it goes to stderr, so that stdout is the report (and --json
    # stays parseable)
    with stdout_to_stderr():
        asked = ModelRun(
            args.factory,
            args.inputs,
            ports=args.port,
            activations_files=files,
            save_path=args.save_activations,
            train=args.train,
            keras=args.keras,
            dask=args.dask,
            onnx_files={label: (path, maps.get(label)) for label, path in onnx.items()},
            calibration=args.calibration,
            scheduler=args.scheduler,
        )
        report = run_model(asked, progress=item_progress("model"))
    text = (
        dumps(report.as_dict())
        if args.json
        else render(report, args.verbose, args.only_flagged, args.explain_verdicts, colour())
    )
    print(text)
    if args.html:  # after the report is printed: a page that cannot be written costs only the page
        _write_page(args.html, report)
    if report.not_saved:  # the run's report is printed above: only the file is missing
        raise OpbenchError(report.not_saved)
    if report.interrupted:
        return stopped_early(report.interrupted, "the report covers the ports finished so far")
    return 0 if report.within_rounding else 1


def _write_page(path: str, report) -> None:
    """The --html page, or one line saying why not (a renderer's exception included)."""
    from accuracy.report.model_page import write_model_page

    sys.stdout.flush()
    try:
        write_model_page(path, report)
    except OpbenchError:
        raise
    except Exception as exc:
        raise OpbenchError(f"--html {path}: the page could not be drawn: {first_line(exc, typed=True)}") from None
