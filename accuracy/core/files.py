"""One way to write a file or a directory of files so that a reader sees the old or the new, never half.

Every writer of results, fingerprints, cached references, saved inputs and reports goes through
here: a temporary file in the same directory (same file system, so the rename is atomic), fsync,
then os.replace. A full disk, a read-only disk or a kill leaves the old file as it was and no
temporary file behind (a kill leaves one, named so that `remove_stale_temps` finds it). A symbolic
link is never written through, dangling or not: it could point anywhere, e.g. at a system file
when run as root. A directory is replaced only if opbench made it (`OWNED_MARK`), never a user's.

Reading goes through `check_regular` first: a FIFO would block the reader for ever and a link to
/dev/zero would be read until memory runs out.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from accuracy.core.errors import OpbenchError

TEMP_MARK = ".tmp-"  # every temporary name holds it: .<name>.tmp-<random>
OWNED_MARK = ".opbench-owned"  # in every directory `atomic_directory` makes: opbench may replace it
# What a report held before OWNED_MARK existed: such a directory is still opbench's own
LEGACY_REPORT_FILES = ("index.html", "report.md", "steps.csv")
MAX_READ_BYTES = 256 * 1024**2  # a results file, fingerprint or benchmarks.json larger than this is not asv's


def os_error_line(action: str, path: Path | str, exc: OSError) -> str:
    """'cannot write results/x.json: No space left on device': the one line for an I/O error."""
    return f"cannot {action} {path}: {exc.strerror or exc}"


def refuse_symlink(path: Path) -> None:
    """A symbolic link where opbench writes is refused, never followed."""
    if path.is_symlink():
        raise OpbenchError(f"{path} is a symbolic link; opbench does not write through links (remove it)")


def check_owned_directory(flag: str, path: Path) -> None:
    """Refuse to replace a non-empty directory opbench did not make: it holds a user's files."""
    refuse_symlink(path)
    if not path.is_dir():
        return
    try:
        entries = {entry.name for entry in path.iterdir()}
    except OSError as exc:
        raise OpbenchError(os_error_line("read", path, exc)) from None
    if entries and OWNED_MARK not in entries and not entries.issuperset(LEGACY_REPORT_FILES):
        raise OpbenchError(
            f"{flag} {path} is a directory opbench did not create and would be replaced; "
            "choose another (an empty or new directory, or an earlier report)"
        )


def cache_home() -> Path:
    """$XDG_CACHE_HOME, or ~/.cache where it is unset, empty or relative (as the XDG spec says):
    an empty one put the caches in the current directory, where anyone could plant entries."""
    value = os.environ.get("XDG_CACHE_HOME", "")
    return Path(value) if os.path.isabs(value) else Path.home() / ".cache"


def check_private_directory(path: Path, what: str) -> None:
    """A cache whose entries opbench trusts (references, a compiled library it loads) must belong to
    this user and be writable by no one else; one that does not exist yet is made so."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OpbenchError(os_error_line("use", path, exc)) from None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        owner = "another user's" if info.st_uid != os.geteuid() else "writable by others"
        raise OpbenchError(
            f"{what} {path} is {owner} (mode {stat.filemode(info.st_mode)}), so its entries cannot be trusted; "
            f"use a directory of your own (chmod go-w {path}, or another one)"
        )


def no_parent(path: Path | str) -> str | None:
    """Why a new file cannot go at `path`, its directory in words ("directory out does not exist",
    "notes.txt is not a directory": a file there was called missing); None where it can."""
    parent = Path(path).parent
    if parent.is_dir():
        return None
    return f"{parent} is not a directory" if parent.exists() else f"directory {parent} does not exist"


def not_a_file(path: Path | str) -> str:
    """Why `path` is no regular file to read, in words: "no such file", "a directory, not a file",
    "a FIFO, not a regular file", ... (a directory or a FIFO was called "no such file")."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    kind = next((words for test, words in kinds if test(mode)), "a device")
    return f"{kind}, not a file" if kind == "a directory" else f"{kind}, not a regular file"


def check_regular(path: Path | str, limit: int = MAX_READ_BYTES) -> int:
    """The size of `path` if it is a regular file of at most `limit` bytes, else one line.

    A FIFO, a device (a link to /dev/zero) or a huge file is refused before it is opened."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise OpbenchError(os_error_line("read", path, exc)) from None
    if not stat.S_ISREG(info.st_mode):
        raise OpbenchError(f"{path} is not a regular file (a FIFO, device or directory); opbench reads only files")
    if info.st_size > limit:
        raise OpbenchError(
            f"{path} is {info.st_size / 1024**2:.0f} MiB, more than the {limit / 1024**2:.0f} MiB opbench reads "
            "from such a file"
        )
    return info.st_size


def read_json(path: Path | str, limit: int = MAX_READ_BYTES) -> object:
    """The JSON value in a regular file of at most `limit` bytes; any problem is one line naming it.

    Deep nesting (200 KB of `[`) is a RecursionError in the parser, not a crash."""
    check_regular(path, limit)
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read(limit + 1))
    except OSError as exc:
        raise OpbenchError(os_error_line("read", path, exc)) from None
    except RecursionError:
        raise OpbenchError(f"{path}: not JSON opbench can read (nested too deeply)") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise OpbenchError(f"{path}: not JSON ({' '.join(str(exc).split())})") from None


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; some file systems cannot open a directory, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rename_no_clobber(tmp: str, path: Path) -> None:
    """Rename `tmp` to `path` only where nothing is at `path`: os.link fails with EEXIST on any
    entry there (a file the user made during the run), atomically. A file system without hard
    links gets an O_EXCL claim of the name first, then the rename over that claim."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (EPERM, ENOTSUP): claim the name, then take it
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def write_atomic(
    path: Path | str,
    content: str | bytes | Callable[[BinaryIO], None],
    *,
    replace: bool = True,
    durable: bool = True,
) -> Path:
    """Write `content` (text, bytes, or a function that writes to a binary handle) to `path` atomically.

    Raises OpbenchError (one line) on any OSError; the old file, if any, is untouched and the
    temporary file is removed whatever went wrong, including a KeyboardInterrupt. `replace=False`
    (a file for the user that was not there when the run began): a file that appeared at `path`
    since is kept, and the write is refused, never over it. `durable=False` skips the two fsyncs
    (the file's, then its directory's) for what can be computed again and is checked when read.
    """
    path = Path(path)
    refuse_symlink(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TEMP_MARK}")
    except OSError as exc:
        raise OpbenchError(os_error_line("write", path, exc)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(content, str):
                handle.write(content.encode("utf-8"))
            elif isinstance(content, bytes):
                handle.write(content)
            else:
                content(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results and reports are read by others
        if replace:
            os.replace(tmp, path)
        else:
            _rename_no_clobber(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, FileExistsError):
            raise OpbenchError(f"{path}: a file appeared there during the run; it is kept, not overwritten") from None
        if isinstance(exc, OSError):
            raise OpbenchError(os_error_line("write", path, exc)) from None
        raise
    if durable:
        _fsync_dir(path.parent)
    return path


def replace_atomic(source: Path, target: Path) -> None:
    """os.replace with the one-line error; `target` must not be a symbolic link."""
    refuse_symlink(target)
    try:
        os.replace(source, target)
    except OSError as exc:
        raise OpbenchError(os_error_line("write", target, exc)) from None
    _fsync_dir(target.parent)


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield an empty temporary directory beside `target`; on success it takes `target`'s place.

    The old directory is moved aside, the new one renamed in and the old one deleted, so
    `target` holds the whole old or the whole new contents, never a mix. On any error the
    temporary directory is removed and `target` is as it was. A `target` opbench did not make
    (no OWNED_MARK in it) is refused, not replaced.
    """
    refuse_symlink(target)
    check_owned_directory("the report directory", target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{TEMP_MARK}"))
    except OSError as exc:
        raise OpbenchError(os_error_line("write", target, exc)) from None
    old: Path | None = None
    try:
        yield tmp
        (tmp / OWNED_MARK).write_text("made by opbench; it replaces this directory whole on its next write\n")
        os.chmod(tmp, 0o755)
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{TEMP_MARK}old-"))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
    except BaseException as exc:
        if old is not None and (old / target.name).exists() and not target.exists():
            os.replace(old / target.name, target)  # the swap failed half-way: put the old one back
        for leftover in (tmp, old):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
        if isinstance(exc, OSError):
            raise OpbenchError(os_error_line("write", target, exc)) from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(target.parent)


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete temporary files and directories a killed writer left in `folder` (call only while no
    other writer can be at work there, e.g. under the results lock); return what was removed."""
    removed = []
    for entry in folder.glob(f".*{TEMP_MARK}*"):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        removed.append(entry)
    return removed
