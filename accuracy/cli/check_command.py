"""`opbench check`: is an output computed elsewhere within rounding on these inputs?"""

from __future__ import annotations

from accuracy.cli.arguments import add_command, add_json, labelled_file
from accuracy.core.errors import OpbenchError
from accuracy.core.json_output import dumps


def register(sub) -> None:
    p = add_command(
        sub,
        "check",
        run,
        help="judge outputs from any framework on the op's or your own inputs",
        description="Judge each output (.npy, .npz, .safetensors or .pt) against the op's exact "
        "reference on the given inputs, or against a function of yours evaluated in float64. "
        "Exit status: 0 all within rounding, 1 otherwise, 2 bad input.",
    )
    p.add_argument("op", nargs="?", help="an op name (`opbench list`); leave out with --fn")
    p.add_argument(
        "--fn",
        metavar="MODULE:FUNCTION",
        help="judge a function of yours instead (numpy or torch; called with the inputs by name)",
    )
    p.add_argument(
        "--inputs",
        required=True,
        metavar="FILE",
        help="the inputs by name (.npz, .safetensors or .pt), e.g. from `opbench inputs`",
    )
    p.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="an output to judge (repeatable); its dtype decides the format",
    )
    p.add_argument(
        "--contract",
        type=int,
        metavar="ULPS",
        help="hold every output to this many ulps from the correctly rounded result instead of the "
        "op's generic contract",
    )
    add_json(p)


def run(args) -> int:
    from accuracy.cli.text.check import render
    from accuracy.workflows.check import check  # the judge and scipy: only when it runs

    if (args.op is None) == (args.fn is None):
        raise OpbenchError("give an op or --fn MODULE:FUNCTION, not both")
    outputs = dict(labelled_file("--output", o, "tf=out_tf.npy") for o in args.output)
    if len(outputs) != len(args.output):
        raise OpbenchError("two --output arguments share a label; give each its own")
    report = check(op=args.op, fn=args.fn, inputs=args.inputs, outputs=outputs, contract=args.contract)
    print(dumps(report.as_dict()) if args.json else render(report))
    return 0 if report.within_rounding else 1
