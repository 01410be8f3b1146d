"""The LibTorch extension's build (issue 22 #1): one build per torch build and source, shared by
every environment, a lock a killed build left behind recovered, a live builder waited for with a
timeout and one line.

No build runs here (the compiler only rejects one-line sources): `compile_library` stands in
for cpp_extension.load and takes cpp_extension's own lock (torch.utils.file_baton.FileBaton on
`<build dir>/lock`) exactly as it does, so a stale lock that was not recovered would make it
fail instead of waiting forever. A compile error and a library that does not load are one line.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hidden_tools import hide
from torch.utils.file_baton import FileBaton

from accuracy.backends import libtorch as libtorch_module
from accuracy.backends.libtorch import BUILD_ERRORS, BUILDING, LibTorchBackend, build, build_name
from accuracy.core.errors import OpbenchError
from accuracy.run import prepare_environment as setup_step

ROOT = Path(__file__).resolve().parents[2]


def _cpp_extension_load(build_dir: Path):
    """What cpp_extension.load does with its lock: take it, or (had it stayed) wait on it forever."""

    def load():
        baton = FileBaton(str(build_dir / "lock"))
        assert baton.try_acquire(), "cpp_extension would wait forever on this lock"
        baton.release()

    return load


def _not_built(library: Path):
    raise AssertionError(f"there is no {library.name} to load")


def _built_already():
    raise AssertionError("a finished build was compiled again")


def _holder(build_dir: Path, make_stale_lock: bool) -> subprocess.Popen:
    """A process inside build_lock (as a build is), optionally having created cpp_extension's lock."""
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from accuracy.backends.libtorch import build_lock
        d = Path({str(build_dir)!r})
        with build_lock(d, timeout=60):
            if {make_stale_lock!r}:
                (d / "lock").write_text("")
            print("holding", flush=True)
            time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert proc.stdout.readline().strip() == "holding"
    return proc


@pytest.mark.slow  # end to end: other processes hold the build
def test_a_lock_left_by_a_killed_build_is_recovered(tmp_path, capsys):
    build_dir = tmp_path / "opbench_libtorch_x"
    holder = _holder(build_dir, make_stale_lock=True)
    holder.send_signal(signal.SIGKILL)  # killed mid-build: cpp_extension's `lock` file stays behind
    holder.wait(timeout=60)
    assert (build_dir / "lock").exists()
    build("opbench_libtorch_x", build_dir, _cpp_extension_load(build_dir), _not_built, timeout=5)
    assert not (build_dir / "lock").exists()
    assert capsys.readouterr().err == f"opbench: {BUILDING} in {build_dir}\n"  # no .so yet: it says it builds


@pytest.mark.slow  # end to end: other processes hold the build
def test_a_live_builder_is_waited_for_then_one_line(tmp_path, capsys, monkeypatch):
    build_dir = tmp_path / "opbench_libtorch_x"
    holder = _holder(build_dir, make_stale_lock=False)
    try:
        monkeypatch.setenv("OPBENCH_LIBTORCH_BUILD_TIMEOUT", "0.5")
        with pytest.raises(OpbenchError) as error:
            build("opbench_libtorch_x", build_dir, _cpp_extension_load(build_dir), _not_built)
    finally:
        holder.kill()
        holder.wait(timeout=60)
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        f"the LibTorch backend is being built by another process (pid {holder.pid}) in {build_dir}; "
        "waited 0.5 s (set OPBENCH_LIBTORCH_BUILD_TIMEOUT to wait longer)"
    )
    assert f"opbench: waiting for pid {holder.pid}, {BUILDING}" in capsys.readouterr().err


def test_a_built_extension_loads_without_a_word(tmp_path, capsys):
    build_dir = tmp_path / "opbench_libtorch_x"
    build_dir.mkdir()
    (build_dir / "opbench_libtorch_x.so").write_bytes(b"")
    loaded: list[Path] = []
    build("opbench_libtorch_x", build_dir, _built_already, loaded.append, timeout=5)
    assert loaded == [build_dir / "opbench_libtorch_x.so"]
    assert capsys.readouterr().err == ""


def test_a_compile_error_is_one_line_naming_the_compilers_error_and_the_log(tmp_path, capsys):
    """cpp_extension itself, on a source the compiler rejects: its RuntimeError holds ninja's whole
    output; opbench says the compiler's first error in one line and keeps the rest in a file."""
    from torch.utils import cpp_extension

    source = tmp_path / "broken.cpp"
    source.write_text("int broken( {\n")
    build_dir = tmp_path / "opbench_broken"
    compile_library = functools.partial(
        cpp_extension.load, name="opbench_broken", sources=[str(source)], build_directory=str(build_dir)
    )
    with pytest.raises(OpbenchError) as raised:
        build("opbench_broken", build_dir, compile_library, _not_built, timeout=5)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("the LibTorch backend does not compile here: ")
    assert f"{source}:1:" in message and "error:" in message
    log = build_dir / BUILD_ERRORS
    assert message.endswith(f"(the compiler's output: {log})")
    assert "Error building extension 'opbench_broken'" in log.read_text()
    assert capsys.readouterr().err == f"opbench: {BUILDING} in {build_dir}\n"


def test_a_library_that_does_not_load_is_one_line_saying_what_to_delete(tmp_path):
    """A truncated build (a disk that filled up, say), loaded by torch as opbench loads a build."""
    import torch

    build_dir = tmp_path / "opbench_libtorch_x"
    build_dir.mkdir()
    library = build_dir / "opbench_libtorch_x.so"
    library.write_bytes(b"\x7fELF truncated")
    with pytest.raises(OpbenchError) as raised:
        build("opbench_libtorch_x", build_dir, _built_already, lambda path: torch.ops.load_library(str(path)))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"the LibTorch build {library} does not load (")
    assert message.endswith("); delete it to rebuild")


@pytest.mark.slow  # end to end: other processes hold the build
def test_a_process_loading_a_built_extension_is_waited_for_without_a_word(tmp_path, capsys):
    """Dask workers start LibTorch together: one holds the lock while it loads the build; the other
    once said it waited for a build that was not happening."""
    build_dir = tmp_path / "opbench_libtorch_x"
    build_dir.mkdir()
    (build_dir / "opbench_libtorch_x.so").write_bytes(b"")
    holder = _holder(build_dir, make_stale_lock=False)
    try:
        with pytest.raises(OpbenchError, match=f"another process \\(pid {holder.pid}\\)"):
            build("opbench_libtorch_x", build_dir, _built_already, _not_built, timeout=0.5)
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert capsys.readouterr().err == ""


def test_each_torch_build_and_source_has_its_own_build_whichever_environment_has_them(monkeypatch):
    """The project's .venv, a second clone's and asv's history virtualenvs once had one build each
    (a fresh clone compiled for 40 s in `make setup`): they share it when their torch is the same
    build, and load it without cpp_extension, whose ninja file would rebuild it for them."""
    here = build_name("2.13.0+cpu abc123 cxx11abi=True", ".cpython-311-x86_64-linux-gnu.so", b"source")
    others = {
        build_name("2.12.1+cpu def456 cxx11abi=True", ".cpython-311-x86_64-linux-gnu.so", b"source"),
        build_name("2.13.0+cpu abc124 cxx11abi=True", ".cpython-311-x86_64-linux-gnu.so", b"source"),  # a rebuild
        build_name("2.13.0+cpu abc123 cxx11abi=False", ".cpython-311-x86_64-linux-gnu.so", b"source"),
        build_name("2.13.0+cpu abc123 cxx11abi=True", ".cpython-312-x86_64-linux-gnu.so", b"source"),
        build_name("2.13.0+cpu abc123 cxx11abi=True", ".cpython-311-x86_64-linux-gnu.so", b"edited source"),
    }
    assert len(others) == 5 and here not in others
    backend = LibTorchBackend()
    assert backend.build_directory.name == backend.build_name
    monkeypatch.setattr(sys, "prefix", "/elsewhere/.asv/env/0c28faf1")  # another environment, the same torch
    assert LibTorchBackend().build_name == backend.build_name
    # built (make setup): another environment loads the library and never calls cpp_extension
    assert backend.info()["built"]
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load", lambda **_: _built_already())
    elsewhere = LibTorchBackend()
    x = elsewhere.torch.linspace(-3, 3, 7, dtype=elsewhere.torch.float64)
    assert elsewhere.torch.equal(elsewhere.namespace.exp(x), elsewhere.torch.exp(x))


@pytest.mark.slow  # make setup's own step: every framework, torch.compile's and Dask's imports (~12 CPU-s)
def test_make_setup_builds_the_backend_or_says_in_one_line_why_not(monkeypatch, capsys, tmp_path):
    """`python -m accuracy.run.prepare_environment` (make setup): the build, loaded; without a
    compiler, one line and setup goes on, LibTorch's implementations then absent; a compiler
    that rejects the source, one line and setup goes on."""
    assert setup_step.main() == 0
    assert LibTorchBackend().info()["built"]
    capsys.readouterr()  # in a fresh clone another test may have been building it meanwhile
    hide(monkeypatch, commands=("c++",))
    # the other frameworks loaded above; again they would cost their imports (8 CPU-s), not the line
    torch_only = [b for b in setup_step.catalog_backends() if b.module == "torch"]
    monkeypatch.setattr(setup_step, "catalog_backends", lambda: torch_only)
    assert setup_step.main() == 0
    assert capsys.readouterr().err == "opbench: the LibTorch backend is not built: no C++ compiler\n"
    # a compiler that rejects the source: one line too, and setup goes on
    monkeypatch.undo()
    monkeypatch.setattr(setup_step, "catalog_backends", lambda: torch_only)
    broken = tmp_path / "libtorch.cpp"
    broken.write_text("int broken( {\n")
    monkeypatch.setattr(libtorch_module, "SOURCES", [broken])
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    assert setup_step.main() == 0
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith(f"opbench: {BUILDING} in {tmp_path / 'extensions'}")
    assert said[1].startswith(
        "opbench: the LibTorch backend is not built: the LibTorch backend does not compile here: "
    )
    assert f"{broken}:1:" in said[1] and len(said) == 2
