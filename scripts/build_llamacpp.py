"""Build llama.cpp from the llama-cpp-python sdist into a versioned cache (stdlib only).

The sdist of llama-cpp-python vendors llama.cpp under ``vendor/llama.cpp``; this script
downloads it with pip (``--no-binary llama-cpp-python``), extracts it, and builds the few tools the
live tests drive (``llama-speculative-simple``, ``llama-server``, ``llama-eval-callback``)
with cmake and ninja into::

    ${EAGLE_CONTRACT_LLAMACPP_CACHE:-~/.cache/eagle-contract/llamacpp}/<version>/bin/

and keeps the vendored converter next to them (``<version>/converter/``: its
``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``; run the converter with
``PYTHONPATH=<version>/converter/gguf-py``).

Idempotent: a finished build leaves ``<version>/DONE``; with it present nothing is redone.
A half-written build (no ``DONE``) is rebuilt from its build folder. ``--instrumented``
also applies ``scripts/llamacpp-eagle3-trace.patch`` (instrumentation, not upstream: it
appends the aux states the EAGLE-3 draft is fed to the file ``$EAGLE_CONTRACT_EAGLE3_TRACE``)
to a copy of ``common/speculative.cpp`` and links ``llama-speculative-simple`` with it into
``<version>/instrumented/bin/`` (the stock build and its binaries are never patched).

    python scripts/build_llamacpp.py            # stock build (about 14 min on 2 idle cores)
    python scripts/build_llamacpp.py --instrumented
    python scripts/build_llamacpp.py --print-bin  # where the binaries are (or would be)
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "0.3.36"
TARGETS = ("llama-speculative-simple", "llama-server", "llama-eval-callback")
PATCH = Path(__file__).resolve().parent / "llamacpp-eagle3-trace.patch"


def cache_root() -> Path:
    env = os.environ.get("EAGLE_CONTRACT_LLAMACPP_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "eagle-contract" / "llamacpp"
    return base.expanduser()


def version_dir(version: str = VERSION) -> Path:
    return cache_root() / version


def log(msg: str) -> None:
    print(f"build_llamacpp: {msg}", flush=True)


def run(cmd: list[str], **kw: object) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def fetch_source(vdir: Path, version: str) -> Path:
    """Download and extract the sdist once; return the vendored llama.cpp folder."""
    src = vdir / "src"
    vendored = src / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    marker = src / ".extracted"
    if marker.exists() and vendored.is_dir():
        return vendored
    shutil.rmtree(src, ignore_errors=True)
    dl = vdir / "sdist"
    dl.mkdir(parents=True, exist_ok=True)
    tarballs = sorted(dl.glob("*.tar.gz"))
    if not tarballs:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                "llama-cpp-python",  # the sdist; ``:all:`` would also build the build
                f"llama-cpp-python=={version}",  # backend's own deps from source (minutes)
                "-d",
                str(dl),
            ]
        )
        tarballs = sorted(dl.glob("*.tar.gz"))
    if not tarballs:
        raise SystemExit(f"build_llamacpp: no sdist for llama-cpp-python=={version} in {dl}")
    tmp = vdir / "src.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(tarballs[0]) as tf:
        tf.extractall(tmp, filter="data")
    extracted = list(tmp.iterdir())
    if len(extracted) != 1:
        raise SystemExit(f"build_llamacpp: unexpected sdist layout: {extracted}")
    src.mkdir(parents=True)
    extracted[0].rename(src / f"llama_cpp_python-{version}")
    shutil.rmtree(tmp)
    if not vendored.is_dir():
        raise SystemExit(f"build_llamacpp: the sdist has no vendor/llama.cpp ({vendored})")
    marker.write_text(version + "\n")
    return vendored


def build(source: Path, build_dir: Path, bin_dir: Path, jobs: int) -> None:
    run(
        [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            "-DGGML_NATIVE=ON",
            "-DLLAMA_CURL=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
    )
    run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *TARGETS])
    tmp_bin = bin_dir.with_name(bin_dir.name + ".partial")
    shutil.rmtree(tmp_bin, ignore_errors=True)
    tmp_bin.mkdir(parents=True)
    for t in TARGETS:
        built = build_dir / "bin" / t
        if not built.is_file():
            raise SystemExit(f"build_llamacpp: {t} was not built ({built} missing)")
        shutil.copy2(built, tmp_bin / t)
    shutil.rmtree(bin_dir, ignore_errors=True)
    tmp_bin.rename(bin_dir)


CONVERTER = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
CONVERTER_DONE = "converter/DONE"


def converter(vdir: Path, vendored: Path) -> None:
    """The vendored converter (``convert_hf_to_gguf.py`` and its ``conversion`` package)
    and the ``gguf`` package of the same llama.cpp revision, under ``<version>/converter``
    (``C``): ``PYTHONPATH=C/gguf-py python C/convert_hf_to_gguf.py``."""
    out = vdir / "converter"
    tmp = vdir / "converter.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in CONVERTER:
        src = vendored / name
        if src.is_dir():
            shutil.copytree(src, tmp / name)
        elif src.is_file():
            shutil.copy2(src, tmp / name)
    (tmp / "DONE").write_text(vdir.name + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def stock(version: str, jobs: int) -> Path:
    vdir = version_dir(version)
    done = vdir / "DONE"
    if done.exists() and all((vdir / "bin" / t).is_file() for t in TARGETS):
        if not (vdir / CONVERTER_DONE).exists():
            converter(vdir, fetch_source(vdir, version))
        log(f"cached: {vdir / 'bin'}")
        return vdir
    vendored = fetch_source(vdir, version)
    build(vendored, vdir / "build", vdir / "bin", jobs)
    converter(vdir, vendored)
    done.write_text(version + "\n")
    log(f"built: {vdir / 'bin'}")
    return vdir


INSTRUMENTED = "llama-speculative-simple"  # the one tool built with the patch


def instrumented(version: str, jobs: int) -> Path:
    """``llama-speculative-simple`` with scripts/llamacpp-eagle3-trace.patch applied to a copy
    of ``common/speculative.cpp``: that one file is compiled with the stock build's own
    command (``ninja -t commands``) and linked, ahead of the stock ``libcommon.a``, with the
    stock link command into ``<version>/instrumented/bin`` (a minute, not a second build)."""

    vdir = stock(version, jobs)
    idir = vdir / "instrumented"
    done = idir / "DONE"
    patch_text = PATCH.read_text()
    tool = idir / "bin" / INSTRUMENTED
    if done.exists() and done.read_text() == patch_text and tool.is_file():
        log(f"cached: {tool}")
        return idir
    vendored = fetch_source(vdir, version)
    build_dir = vdir / "build"
    shutil.rmtree(idir, ignore_errors=True)
    (idir / "common").mkdir(parents=True)
    source = idir / "common" / "speculative.cpp"
    shutil.copy2(vendored / "common" / "speculative.cpp", source)
    run(["patch", "-p1", "--no-backup-if-mismatch", "-i", str(PATCH)], cwd=str(idir))
    commands = subprocess.run(
        ["ninja", "-C", str(build_dir), "-t", "commands", INSTRUMENTED],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    stock_source = str(vendored / "common" / "speculative.cpp")
    compile_line = next(c for c in commands if c.rstrip().endswith("-c " + stock_source))
    # the link: ninja writes it ": && c++ ... -o bin/TOOL ... && :"
    link_line = next(part for part in commands[-1].split("&&") if f"-o bin/{INSTRUMENTED}" in part)
    obj = idir / "speculative.cpp.o"
    argv = shlex.split(compile_line)
    out = argv.index("-o")
    argv[out + 1] = str(obj)
    argv[-1] = str(source)
    argv = [a for i, a in enumerate(argv) if not _dep_flag(argv, i)]
    run(argv, cwd=str(build_dir))
    link = shlex.split(link_line)
    out = link.index("-o")
    link[out + 1] = str(tool)
    link.insert(out, str(obj))  # ahead of libcommon.a: its speculative.cpp.o is not pulled
    (idir / "bin").mkdir()
    run(link, cwd=str(build_dir))
    done.write_text(patch_text)
    log(f"built: {tool}")
    return idir


def _dep_flag(argv: list[str], i: int) -> bool:
    """Whether ``argv[i]`` is a dependency-file flag (``-MD``, ``-MT X``, ``-MF X``) or the
    value of one: the instrumented compile writes nothing into the stock build folder."""
    if argv[i] in ("-MD", "-MT", "-MF"):
        return True
    return i > 0 and argv[i - 1] in ("-MT", "-MF")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=VERSION, help="llama-cpp-python sdist version")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument(
        "--instrumented",
        action="store_true",
        help="also link llama-speculative-simple with scripts/llamacpp-eagle3-trace.patch",
    )
    ap.add_argument("--print-bin", action="store_true", help="print the bin folder and exit")
    args = ap.parse_args(argv)
    if args.print_bin:
        print(version_dir(args.version) / "bin")
        return 0
    if args.instrumented:
        instrumented(args.version, args.jobs)
    else:
        stock(args.version, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
