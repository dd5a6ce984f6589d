"""`make sanitize`: labkit's C extensions under AddressSanitizer and UndefinedBehaviorSanitizer.

Builds `labkit/wire/_readpath.c`, `labkit/wire/_loopclock.c` and `labkit/_stampfigures.c`
with ``gcc -fsanitize=address,undefined`` into a throwaway folder (the in-place builds are
left as they are), then runs their tests in a child interpreter that imports those builds:
the fuzz tests holding each C function to its Python twin, the SSE whole-chunk and
whole-event readers' and the corpus through the lean transport, the loop clock's tests and
parity fuzz on the C selector, and the stream figures' to-the-bit tests.
The child preloads the ASan runtime (an uninstrumented Python must load it first),
allocates every object with malloc (``PYTHONMALLOC=malloc``: pymalloc's arenas would hide
a read past a small bytes object), leaves leaks unchecked
(CPython leaves memory to the OS at exit) and stops at the first error of either sanitizer,
so an out-of-bounds read or undefined behaviour fails the run. Extra arguments go to pytest.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Each extension's module and source.
EXTENSIONS = {
    "labkit.wire._readpath": REPO / "labkit" / "wire" / "_readpath.c",
    "labkit.wire._loopclock": REPO / "labkit" / "wire" / "_loopclock.c",
    "labkit._stampfigures": REPO / "labkit" / "_stampfigures.c",
}
TESTS = [
    "tests/wire/test_readpath.py",
    "tests/wire/test_chat_content_events.py",
    "tests/wire/test_common_push.py",
    "tests/wire/test_sse_whole_chunks.py",
    "tests/wire/test_sse_whole_events.py",
    "tests/wire/lean/test_push_records.py",
    "tests/wire/test_loopclock.py",
    "tests/wire/test_loopclock_parity.py",
    "tests/wire/test_loopclock_run.py",
    "tests/wire/test_turns.py",
    "tests/test_stampfigures.py",
]
FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-O1",
    "-g",
    "-ffp-contract=off",  # the stream figures are the Python's floats to the bit (setup.py)
]


def library(folder: Path, module: str) -> Path:
    """Where `module`'s sanitized build lies in `folder`."""
    return folder / f"{module.rpartition('.')[2]}{sysconfig.get_config_var('EXT_SUFFIX')}"


def build(folder: Path, module: str, source: Path) -> Path:
    """An extension built with the sanitizers into `folder`."""
    target = library(folder, module)
    command = [
        os.environ.get("CC", "gcc"),
        "-shared",
        "-fPIC",
        *FLAGS,
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        "-o",
        str(target),
    ]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    return target


def runtime() -> str:
    """The ASan runtime gcc links against (preloaded into the child)."""
    cc = os.environ.get("CC", "gcc")
    found = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(found):
        raise SystemExit(f"{cc} has no AddressSanitizer runtime (libasan.so)")
    return found


class _Sanitized(importlib.abc.MetaPathFinder):
    """Finds the extensions in the sanitized builds rather than beside labkit's sources."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in EXTENSIONS:
            return None
        return importlib.util.spec_from_file_location(fullname, library(self.folder, fullname))


def child(folder: str, pytest_args: list[str]) -> int:
    """Run the tests with the builds in `folder` as the extensions."""
    sys.meta_path.insert(0, _Sanitized(Path(folder)))
    from labkit import timing
    from labkit.wire import loopclock, readpath

    for module, (loaded, why) in (
        ("labkit.wire._readpath", readpath.compiled_module()),
        ("labkit.wire._loopclock", loopclock.compiled_module()),
        ("labkit._stampfigures", (timing.STAMP_FIGURES, "not built")),
    ):
        where = None if loaded is None else os.path.realpath(loaded.__file__)
        if where != os.path.realpath(library(Path(folder), module)):
            print(f"the sanitized {module} was not loaded ({why or where})", file=sys.stderr)
            return 2
        print(f"{module} from {where}", flush=True)
    if readpath.IMPLEMENTATION != "c":
        print(f"labkit runs the {readpath.READ_PATH.describe()} read path", file=sys.stderr)
        return 2
    if loopclock.SELECT_IMPLEMENTATION != "c":
        print("labkit runs the Python timed select()", file=sys.stderr)
        return 2
    import pytest

    # --capture=sys: a sanitizer writes its report to fd 2 as it stops the process, which
    # pytest's default fd capture would swallow.
    args = ["-q", "-p", "no:cacheprovider", "--capture=sys", *TESTS, *pytest_args]
    return int(pytest.main(args))


def main() -> None:
    """Build, then run the tests in a child that preloads the sanitizers' runtime."""
    args = sys.argv[1:]
    if args[:1] == ["--child"]:
        sys.exit(child(args[1], args[2:]))
    with tempfile.TemporaryDirectory(prefix="labkit-sanitize-") as tmp:
        for module, source in EXTENSIONS.items():
            build(Path(tmp), module, source)
        env = {k: v for k, v in os.environ.items() if k not in ("LABKIT_READPATH", "PYTHONMALLOC")}
        env.update(
            LD_PRELOAD=runtime(),
            PYTHONMALLOC="malloc",
            ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",
            UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        )
        done = subprocess.run([sys.executable, __file__, "--child", tmp, *args], cwd=REPO, env=env)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
