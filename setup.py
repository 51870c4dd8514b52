"""Builds the exec shim (cronstable/runtime/shim/cronstable-exec.c) with the package.

Everything else about the package is in pyproject.toml.  The shim is the small C
program jobs are started from, so that a job's maxRss is its own and not the
daemon's (cronstable/runtime/exec_shim.py).  It is compiled by ``build_py``: into
the build directory for a wheel (which is then tagged for this platform), into the
source tree for an editable install (``pip install -e .``).  Without a working C
compiler the package installs without it, and the daemon says so when it starts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIM_PACKAGE_DIR = Path("cronstable", "runtime", "shim")
SHIM_NAME = "cronstable-exec"
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra"]


# the builds tried in turn: the one without a C library (Linux on x86_64 and aarch64;
# the source refuses it elsewhere), then the C library's, static, then dynamic
SHIM_BUILDS = (
    [
        "-DCRONSTABLE_EXEC_RAW",
        "-static",
        "-nostdlib",
        "-fno-stack-protector",
        "-fno-builtin",
        "-fno-pie",
        "-no-pie",
    ],
    ["-static"],
    [],
)


def compile_shim(source: Path, target: Path, builds: tuple[list[str], ...] = SHIM_BUILDS) -> bool:
    """Compile the shim to ``target`` with the first of ``builds`` that works.
    False (and a line saying why) without a working C compiler."""
    compiler = shlex.split(os.environ.get("CC", "cc"))
    if not compiler or shutil.which(compiler[0]) is None:
        print(
            f"cronstable: no C compiler ({compiler[0] if compiler else 'CC'}): "
            "the exec shim is not built",
            file=sys.stderr,
        )
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp, SHIM_NAME)
        errors = ""
        for flags in builds:
            done = subprocess.run(
                [*compiler, *CFLAGS, *flags, "-o", str(built), str(source)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0 and _runs(built):
                os.replace(built, target)  # atomic: a running daemon never sees half a file
                os.chmod(target, 0o755)
                return True
            errors = done.stderr
        print(f"cronstable: the exec shim did not compile:\n{errors}", file=sys.stderr)
        return False


def _runs(shim: Path) -> bool:
    """Whether a built shim starts ``true`` and says so (a build can link and not run)."""
    read_end, write_end = os.pipe()
    try:
        probe = subprocess.run(
            [str(shim), str(write_end), "-", "-", "true"],
            pass_fds=(write_end,),
            capture_output=True,
            timeout=10,
            check=False,
        )
        os.close(write_end)
        write_end = -1
        said = os.read(read_end, 256)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return probe.returncode == 0 and said.startswith(b"started ") and b"\nended " in said


class BuildWithShim(build_py):
    """build_py, plus the exec shim."""

    def run(self) -> None:
        super().run()
        source = HERE / SHIM_PACKAGE_DIR / f"{SHIM_NAME}.c"
        if self.editable_mode:
            compile_shim(source, HERE / SHIM_PACKAGE_DIR / SHIM_NAME)
        else:
            compile_shim(source, Path(self.build_lib) / SHIM_PACKAGE_DIR / SHIM_NAME)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        built = Path(self.build_lib) / SHIM_PACKAGE_DIR / SHIM_NAME
        if not self.editable_mode and built.exists():
            outputs.append(str(built))
        return outputs


class WithCompiledCode(Distribution):
    """A distribution holding a compiled program: built as platform code (platlib)."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """The wheel is for this platform, any Python 3 (the shim uses no Python ABI)."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


if __name__ == "__main__" and sys.argv[1:] == ["shim"]:
    # `make` in a checkout: the shim beside its source, as an editable install builds it;
    # without a compiler that is said, and the daemon falls back (exit 0 either way)
    compile_shim(HERE / SHIM_PACKAGE_DIR / f"{SHIM_NAME}.c", HERE / SHIM_PACKAGE_DIR / SHIM_NAME)
elif __name__ == "__main__":  # (the build backend runs this file as __main__ too)
    setup(
        distclass=WithCompiledCode,
        cmdclass={"build_py": BuildWithShim, "bdist_wheel": PlatformWheel},
    )
