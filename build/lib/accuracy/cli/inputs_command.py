"""`opbench inputs OP --save FILE`: the op's rounded inputs, to run through any framework."""

from __future__ import annotations

from pathlib import Path

from accuracy.cli.arguments import add_case, add_command, add_results
from accuracy.core.errors import OpbenchError

RESULTS_MARKER = "benchmarks.json"  # asv writes it at the top of every results directory


def register(sub) -> None:
    p = add_command(
        sub,
        "inputs",
        run,
        help="save an op's rounded inputs to run through another framework",
        description="Save the op's rounded inputs, keyed by its input names, and print the call each "
        "framework makes on them. Run them anywhere, save the outputs, then `opbench check`.",
    )
    add_case(p, threads_help=None)
    p.add_argument(
        "--save",
        type=Path,
        required=True,
        metavar="FILE",
        help="where to write them: FILE.npz, or FILE.safetensors (needed for bfloat16)",
    )
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_results(p)


def _inside_results(path: Path, results: Path) -> Path | None:
    """The results directory `path` would land in: --results, or any folder asv wrote results to."""
    target = path.resolve()
    for folder in target.parents:
        if folder == results.resolve() or (folder / RESULTS_MARKER).is_file():
            return folder
    return None


def run(args) -> int:
    from accuracy.workflows.array_files import write_arrays
    from accuracy.workflows.evaluation import make_case

    case = make_case(args.op, args.dtype, args.size, args.condition)
    folder = _inside_results(args.save, args.results)
    if folder is not None:
        raise OpbenchError(f"{args.save}: inside the results directory {folder}; save inputs elsewhere")
    write_arrays(args.save, case.inputs, force=args.force)
    print(f"{args.save}: {case.op.name} inputs [{case.fmt.name}, size {case.size}, {case.condition} inputs]")
    for name, array in case.inputs.items():
        print(f"  {name}: {array.dtype} {tuple(array.shape)}")
    print("the calls opbench's implementations make on them:")
    for impl in (i.at(case.fmt.name) for i in case.op.impls if case.fmt.name in i.dtypes):
        semantics = f"  (semantics: {impl.semantics})" if impl.semantics else ""
        print(f"  {impl.backend}: {impl.variant}{semantics}")
    print(f"then: opbench check {case.op.name} --inputs {args.save} --output LABEL=FILE.npy")
    return 0
