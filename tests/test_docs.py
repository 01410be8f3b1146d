"""Every code block of README.md and docs/*.md, run as written, and every path they name checked.

A block's language says what it is: `sh` and `python` blocks run (each in a fresh directory with
`.venv` pointing at this interpreter's environment; a python block that defines `test_` functions
runs under pytest), and every other block must say why not. In a `sh` block, each plain
`.venv/bin/opbench` line runs through `main` in this process, as the console script calls it, and
the lines between (a `cat` of a file, a python script) run in bash, in order: a fresh process paid
1.5-3.5 CPU-s of imports a command (`explain std` 1.6 CPU-s against 0.03; README's Keras port 5 s,
TensorFlow's import), and what only a fresh process shows (its exit on signals, the libraries' logs
at import) has tests of its own. An HTML comment right before a block
says more, `;`-separated:

- `<!-- slow -->`: the block runs under @pytest.mark.slow;
- `<!-- exit N -->`: its expected exit status (default 0), e.g. a check that finds a bug exits 1;
- `<!-- not run: REASON -->`: it cannot run here (a synopsis, a JVM sketch, a 20-minute matrix);
- `<!-- output -->`: the output of the nearest run block above it on the page. Each shown line
  that carries a verdict must appear in the real output with the same leading labels and the
  same verdicts; shown lines without digits (headings, column names) must appear too. Numbers
  are not compared: they are this machine's, the verdicts are the claim.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import run_main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("sh", "python")
VERDICT = re.compile(r"within rounding|suspicious|beyond rounding|undetermined")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<code>.*?)^(?P=indent)```$", re.M | re.S)
FIRST_NUMBER = re.compile(r"(?<![\w.])[-+]?(\d|\.\d)")  # a number that starts a word, not bn1's or float32's
MARK = re.compile(r"<!--\s*(?P<marks>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marks: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def mark(self, name: str) -> str | None:
        """The value of mark `name` ('' for a flag such as `slow`), or None if absent."""
        return dict(map(split_mark, self.marks)).get(name)

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and self.mark("not run") is None


def split_mark(mark: str) -> tuple[str, str]:
    """`not run: REASON` -> ("not run", REASON); `exit 1` -> ("exit", "1"); `slow` -> ("slow", "")."""
    if mark.startswith("not run"):
        return "not run", mark.removeprefix("not run").lstrip(" :")
    name, _, value = mark.partition(" ")
    return name, value.strip()


def parse_marks(comment: str) -> tuple[str, ...]:
    """`slow; exit 1` -> ("slow", "exit 1"); a `not run: ...` reason runs to the comment's end."""
    head, found, reason = comment.partition("not run")
    marks = [m.strip() for m in head.split(";") if m.strip()]
    return (*marks, f"not run{reason}") if found else tuple(marks)


def page_blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    blocks = []
    for m in FENCE.finditer(text):
        marks: list[str] = []  # every mark comment on the lines just above the fence (`slow`, then `exit 1`)
        for line in reversed(text[: m.start()].rstrip("\n").split("\n")):
            found = MARK.search(line)
            if not found:
                break
            marks[:0] = parse_marks(found["marks"])
        indent = len(m["indent"])
        code = "".join(line[indent:] for line in m["code"].splitlines(keepends=True))
        blocks.append(
            Block(page=page, line=text.count("\n", 0, m.start()) + 1, lang=m["lang"], code=code, marks=tuple(marks))
        )
    return blocks


ALL_BLOCKS = [b for page in PAGES for b in page_blocks(page)]


def outputs_of(block: Block) -> list[Block]:
    """The `<!-- output -->` blocks that follow `block` on its page, before the next run block."""
    blocks = page_blocks(block.page)
    shown = []
    for b in blocks[[x.line for x in blocks].index(block.line) + 1 :]:
        if b.runs:
            break
        if b.mark("output") is not None:
            shown.append(b)
    return shown


def test_the_pages_have_blocks_and_the_readme_both_commands():
    """The parser sees the blocks it must run (a parse that found none would pass everything)."""
    assert sum(b.runs for b in ALL_BLOCKS) >= 5
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make bench" in readme and "make test" in readme
    assert len(readme.encode()) <= 10 * 1024


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.id)
def test_every_block_runs_or_says_why(block: Block):
    unknown = [m for m in block.marks if split_mark(m)[0] not in ("slow", "exit", "not run", "output")]
    assert unknown == [], f"{block.id}: unknown marks"
    if block.mark("not run") is not None:
        assert len(block.mark("not run").split()) >= 3, f"{block.id}: say why it does not run"
    elif block.mark("output") is not None:
        earlier = [b for b in page_blocks(block.page) if b.line < block.line and b.runs]
        assert earlier and block in outputs_of(earlier[-1]), f"{block.id}: an output with no run block above it"
    else:
        assert block.lang in RUNNABLE, f"{block.id}: a ```{block.lang} block must be run, an output, or say why not"


def _verdict_row(line: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(leading labels, verdicts) of a line: labels are its fields, split at two or more spaces,
    before the first number (a sentence's own numbers, an error ratio or a count of pairs, are
    this machine's too: its labels end where its first number starts)."""
    labels = []
    for field in re.split(r"\s{2,}", line.strip()):
        if re.match(r"[-+]?(\d|\.\d)|-$", field):
            break
        number = FIRST_NUMBER.search(field)
        if number:
            labels.append(field[: number.start()].rstrip())
            break
        labels.append(field)
    return tuple(labels), tuple(VERDICT.findall(line))


def _same_output(shown: str, actual: str) -> list[str]:
    """The shown lines the actual output does not bear out (whitespace collapsed)."""
    actual_rows = {_verdict_row(line) for line in actual.splitlines() if VERDICT.search(line)}
    actual_lines = {" ".join(line.split()) for line in actual.splitlines()}
    missing = []
    for line in shown.splitlines():
        words = " ".join(line.split())
        if VERDICT.search(line):
            borne_out = _verdict_row(line) in actual_rows
        else:  # a heading or column names; lines with numbers are this machine's, "..." elides
            borne_out = bool(re.search(r"\d", line)) or not set(words) - set("-. ") or words in actual_lines
        if not borne_out:
            missing.append(words)
    return missing


OPBENCH_LINE = re.compile(r"^\.venv/bin/opbench( [^|<>;&$`\\\"'*?]*)$")


HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")


def statements(code: str) -> list[str]:
    """The block's commands as bash reads them: a line ending in a backslash joined to the next,
    a here-document kept whole with the line that starts it; comment lines dropped."""
    found, lines = [], iter(code.splitlines())
    for line in lines:
        while line.endswith("\\"):
            line = line[:-1] + next(lines, "").lstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = HEREDOC.search(line)
        if heredoc:
            body = []
            for more in lines:
                body.append(more)
                if more.strip() == heredoc[1]:
                    break
            line = "\n".join([line, *body])
        found.append(line)
    return found


def opbench_steps(block: Block) -> list[list[str] | str] | None:
    """A `sh` block as steps: each plain `.venv/bin/opbench` line's arguments (run in this process),
    and the bash text between them; None where no line is a plain opbench command (a pipe, a
    redirection, a variable or quoting is the shell's to run)."""
    if block.lang != "sh":
        return None
    steps: list[list[str] | str] = []
    for statement in statements(block.code):
        found = OPBENCH_LINE.match(statement.split(" #")[0].strip())
        if found:
            steps.append(found[1].split())
        elif steps and isinstance(steps[-1], str):
            steps[-1] += "\n" + statement
        else:
            steps.append(statement)
    return steps if any(isinstance(step, list) for step in steps) else None


def _run(command: list[str], workdir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


def _bash(code: str, workdir: Path) -> subprocess.CompletedProcess:
    return _run(["bash", "-c", code], workdir)


def run_steps(
    steps: list[list[str] | str], workdir: Path, capfd: pytest.CaptureFixture[str]
) -> subprocess.CompletedProcess:
    """The steps in order, as `bash -c` runs the block: their output together, the last one's status."""
    done = [run_main(capfd, *step) if isinstance(step, list) else _bash(step, workdir) for step in steps]
    out, err = "".join(d.stdout for d in done), "".join(d.stderr for d in done)
    return subprocess.CompletedProcess(steps[-1], done[-1].returncode, out, err)


def run_block(block: Block, workdir: Path) -> subprocess.CompletedProcess:
    if block.lang == "sh":
        return _bash(block.code, workdir)
    (workdir / "test_block.py").write_text(block.code, encoding="utf-8")
    command = [sys.executable, "test_block.py"]
    if re.search(r"^def test_", block.code, re.M):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "test_block.py"]
    return _run(command, workdir)


def _places(module) -> list[str]:
    """Where a module was loaded from: its file, or a (namespace) package's folders."""
    folders = getattr(module, "__path__", None)
    return [p for p in [getattr(module, "__file__", None), *(folders if isinstance(folders, Iterable) else ())] if p]


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.slow] if b.mark("slow") is not None else []) for b in ALL_BLOCKS if b.runs],
    ids=lambda b: b.id,
)
def test_the_block_runs_as_written(block: Block, tmp_path, monkeypatch, capfd):
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    steps = opbench_steps(block)
    if steps:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", list(sys.path))  # opbench puts the directory of a user's factory first
        before = set(sys.modules)
        try:
            out = run_steps(steps, tmp_path, capfd)
        finally:  # the block's own modules (scratch.ported) are not the next block's
            for name in set(sys.modules) - before:
                if any(Path(place).is_relative_to(tmp_path) for place in _places(sys.modules[name])):
                    del sys.modules[name]
    else:
        out = run_block(block, tmp_path)
    expected = int(block.mark("exit") or 0)
    assert out.returncode == expected, (
        f"{block.id} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    for bad in ("Traceback", "opbench: error", "command not found", "No such file"):
        assert bad not in out.stderr, f"{block.id}: {bad} in stderr:\n{out.stderr[-3000:]}"
    for shown in outputs_of(block):
        assert _same_output(shown.code, out.stdout) == [], f"{shown.id} shows what {block.id} does not print"


def test_a_blocks_opbench_lines_are_steps_of_their_own_and_the_rest_bash_in_order():
    code = (
        "mkdir -p scratch  # a comment\n"
        "cat > scratch/port.py <<'PY'\n.venv/bin/opbench list\nPY\n"
        "# a comment line\n"
        ".venv/bin/opbench model m:f --inputs x.npz \\\n  --port torchscript\n"
        ".venv/bin/python scratch/port.py\n"
        ".venv/bin/opbench list --json > list.json\n"
        ".venv/bin/opbench explain exp  # a comment\n"
    )
    assert opbench_steps(Block(ROOT, 1, "sh", code, ())) == [
        "mkdir -p scratch  # a comment\ncat > scratch/port.py <<'PY'\n.venv/bin/opbench list\nPY",
        ["model", "m:f", "--inputs", "x.npz", "--port", "torchscript"],
        ".venv/bin/python scratch/port.py\n.venv/bin/opbench list --json > list.json",
        ["explain", "exp"],
    ]
    assert opbench_steps(Block(ROOT, 1, "sh", "echo hi | cat\n.venv/bin/opbench list | head\n", ())) is None
    assert opbench_steps(Block(ROOT, 1, "python", ".venv/bin/opbench list\n", ())) is None


def test_an_output_block_is_compared_by_labels_and_verdicts():
    actual = "output  verdict          max ulp\n------  ---------------  -------\nmine    within rounding  1.3e+03\n"
    assert _same_output("output  verdict  max ulp\nmine  within rounding  99\n...\n", actual) == []
    assert _same_output("mine    beyond rounding  1.3e+03\n", actual) == ["mine beyond rounding 1.3e+03"]
    assert _same_output("theirs  within rounding  1\n", actual) == ["theirs within rounding 1"]
    assert _same_output("why:\n", actual) == ["why:"]


# Paths a page names: repository files in backticks or links, and accuracy.* names in backticks.
REPO_PATH = re.compile(
    r"(?<![\w/.])((?:accuracy|benchmarks|benchmarks_self|scripts|tests|docs)/[\w./-]*\w/?)(?![\w./<*{-])"
)
LINK = re.compile(r"\]\((?!https?:)([^)#\s]*)(?:#([^)\s]+))?\)")
DOTTED = re.compile(r"`(accuracy(?:\.\w+)+)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", re.sub(FENCE, "", page.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_link_exists(page: Path):
    text = page.read_text(encoding="utf-8")
    missing = [p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()]
    for target, anchor in LINK.findall(text):
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            missing.append(target)
        elif anchor and anchor not in _anchors(path):
            missing.append(f"{target}#{anchor}")
    for name in DOTTED.findall(text):
        module, attrs = name, []
        while True:
            try:
                obj = importlib.import_module(module)
                break
            except ModuleNotFoundError:
                module, _, attr = module.rpartition(".")
                attrs.insert(0, attr)
        for attr in attrs:
            obj = getattr(obj, attr, None)
        if obj is None:
            missing.append(name)
    assert missing == []


JAVA_LINEAR = """
public class Linear {
    public static void main(String[] args) throws Exception {
        int[] xs = new int[2], ws = new int[2], bs = new int[1];
        float[] x = Npy.read("x.npy", xs), w = Npy.read("W.npy", ws), b = Npy.read("b.npy", bs);
        int batch = xs[0], n = xs[1], out = ws[0];
        float[] y = new float[batch * out];
        for (int i = 0; i < batch; i++)
            for (int o = 0; o < out; o++) {
                float acc = b[o];
                for (int k = 0; k < n; k++) acc += x[i * n + k] * w[o * n + k];
                y[i * out + o] = acc;
            }
        Npy.write("y_java.npy", y, batch, out);
    }
}
"""


def _opbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "accuracy", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("javac") is None, reason="no JDK installed")
def test_the_java_npy_class_round_trips_a_linear_layer(tmp_path):
    """docs/check.md's Java reader and writer, used by a float32 linear layer that opbench judges."""
    (java,) = [b for b in page_blocks(ROOT / "docs" / "check.md") if b.lang == "java"]
    (tmp_path / "Npy.java").write_text(java.code)
    (tmp_path / "Linear.java").write_text(JAVA_LINEAR)
    assert _opbench("inputs", "linear", "--size", "512", "--save", "linear_in.npz", cwd=tmp_path).returncode == 0
    with zipfile.ZipFile(tmp_path / "linear_in.npz") as npz:  # what `unzip linear_in.npz` does
        npz.extractall(tmp_path)
    subprocess.run(["javac", "Npy.java", "Linear.java"], cwd=tmp_path, check=True, timeout=300)
    subprocess.run(["java", "Linear"], cwd=tmp_path, check=True, timeout=300)
    out = _opbench("check", "linear", "--inputs", "linear_in.npz", "--output", "java=y_java.npy", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^java +within rounding ", out.stdout, re.M)


def test_the_architecture_page_names_every_module_of_each_layer():
    """docs/architecture.md's layer list is the tree: each module it names exists in that layer,
    and each module of a layer is named (the old README's layout missed 16)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## The layers") :].split("\n## ", 1)[0]
    bullets = re.findall(r"^- \*\*(\w+)\*\* \(`accuracy/\w+/`\)(.*?)(?=^- |\Z)", section, re.M | re.S)
    assert [layer for layer, _ in bullets] == [
        "core", "reference", "judge", "backends", "catalog", "workflows", "report", "run", "cli"
    ]  # fmt: skip
    problems = []
    for layer, bullet in bullets:
        package = ROOT / "accuracy" / layer
        files = set(re.findall(r"`(?!accuracy/)(?:\w+/)?(\w+\.(?:py|cpp))`", bullet))  # `verdicts.py`, `ops/common.py`
        stems = {Path(f).stem for f in files} | set(re.findall(r"`(\w+)`", bullet))  # or `products` in a list
        present = [p for p in package.rglob("*") if p.suffix in (".py", ".cpp") and not p.name.startswith("__")]
        problems += [f"{layer}: {name} named but absent" for name in sorted(files - {p.name for p in present})]
        problems += [f"{layer}: {p.name} not named" for p in present if p.stem not in stems]
    assert problems == []


def test_stacked_mark_comments_all_apply(tmp_path):
    """`<!-- slow -->` above `<!-- exit 1 -->` marks the block slow too (only the nearest comment
    was read, so the README's slow model example ran in `make test-fast`)."""
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- slow -->\n<!-- exit 1 -->\n```sh\nfalse\n```\n")
    [block] = page_blocks(page)
    assert block.mark("slow") == "" and block.mark("exit") == "1"
