"""The README's "Is my framework's output rounding or a bug?" example (TensorFlow and ONNX Runtime
outputs judged), run as written: its shell block in a fresh directory (with `.venv` pointing at this interpreter's
environment), and its Java reader/writer compiled and used for a float32 linear layer where a JDK is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# one worker evaluates the module's shared fixture once (make test runs pytest-xdist)
pytestmark = pytest.mark.xdist_group("readme")

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Is my framework's output rounding or a bug?"

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


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index(SECTION) :].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory) -> Path:
    """The README's shell block run in a fresh directory; its output kept beside it."""
    d = tmp_path_factory.mktemp("readme")
    (d / ".venv").symlink_to(Path(sys.executable).parent.parent)
    script = re.search(r"```sh\n(.*?)```", _section(), re.S).group(1)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(["bash", "-c", script], cwd=d, env=env, capture_output=True, text=True, timeout=900)
    (d / "stdout.txt").write_text(out.stdout)
    (d / "stderr.txt").write_text(out.stderr)
    return d


@pytest.mark.slow
def test_the_readme_example_runs_as_written(example_dir):
    out = (example_dir / "stdout.txt").read_text()
    assert "Traceback" not in (example_dir / "stderr.txt").read_text()
    assert "x: float32 (32, 512)" in out and "onnxruntime: Gemm(transB=1)" in out
    assert re.search(r"^onnxruntime +within rounding ", out, re.M)
    assert len(re.findall(r"^tensorflow +within rounding ", out, re.M)) == 2
    assert re.search(r"^bug +beyond rounding ", out, re.M)
    assert re.search(r"^tensorflow +bug .* beyond rounding +bug", out, re.M)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("javac") is None, reason="no JDK installed")
def test_the_readme_java_npy_class_round_trips_a_linear_layer(example_dir):
    java = re.search(r"```java\n(.*?)```", _section(), re.S).group(1)
    (example_dir / "Npy.java").write_text(java)
    (example_dir / "Linear.java").write_text(JAVA_LINEAR)
    with zipfile.ZipFile(example_dir / "linear_in.npz") as npz:  # what `unzip linear_in.npz` does
        npz.extractall(example_dir)
    subprocess.run(["javac", "Npy.java", "Linear.java"], cwd=example_dir, check=True, timeout=300)
    subprocess.run(["java", "Linear"], cwd=example_dir, check=True, timeout=300)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "accuracy",
            "check",
            "linear",
            "--inputs",
            "linear_in.npz",
            "--output",
            "java=y_java.npy",
        ],
        cwd=example_dir,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^java +within rounding ", out.stdout, re.M)
