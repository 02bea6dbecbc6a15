"""Serve MathJax 3 and the ipywidgets HTML manager from the built site, not from CDNs.

Left alone, the pages load these scripts from CDNs: with no network the maths stays raw
TeX and the widgets stay blank. This Sphinx extension fetches them once from their npm
packages with the npm client (`npm pack`: Node.js is a prerequisite for building the
book), unpacks the files the pages use into _build/offline_assets/ (never committed) and
adds that folder to html_static_path; mathjax_path and nb_ipywidgets_js in _config.yml
point into it. The folder is deliberately not called _static: Jupyter Book 1 would inject
every .js file found in a _static/ folder into every page.

The widgets use the manager's standalone embedder (embed.js: the standard ipywidgets
controls, no RequireJS); it finds its fonts next to itself. mathjax2_compat.js lets its
MathJax 2 calls reach MathJax 3.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from sphinx.errors import ExtensionError

# npm package spec -> (path inside its tarball, path under offline_assets/)
PACKAGES = {
    "mathjax@3.2.2": ("package/es5", "mathjax"),
    "@jupyter-widgets/html-manager@1.0.15": ("package/dist", "html-manager"),
}
SKIP_SUFFIXES = (".map",)  # source maps: large and never loaded by the pages
SKIP_NAMES = ("embed-amd.js", "libembed-amd.js")  # the RequireJS embedders: unused here
COMPAT_JS = Path(__file__).with_name("mathjax2_compat.js")


def assets_dir(app) -> Path:
    """_build/offline_assets, next to the html output folder."""
    return Path(app.outdir).parent / "offline_assets"


def ensure_assets(target: Path) -> None:
    """Fetch and unpack the pinned packages into target unless it already holds them."""
    stamp = target.with_suffix(".json")  # outside target, so not published
    if target.is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == sorted(PACKAGES):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ExtensionError(
            "offline_assets: `npm` was not found on PATH. Building the book needs Node.js "
            f"(npm) to fetch {', '.join(PACKAGES)} once; install Node.js and build again.")
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory() as tmp:
        tarballs = _npm_pack(npm, Path(tmp))
        for spec, (inner, outer) in PACKAGES.items():
            _unpack(Path(tmp) / tarballs[spec], inner, target / outer, spec)
    stamp.write_text(json.dumps(sorted(PACKAGES)))


def _npm_pack(npm: str, dest: Path) -> dict[str, str]:
    """Download the package tarballs (no dependencies) into dest; return spec -> file name."""
    cmd = [npm, "pack", *PACKAGES, "--json", "--pack-destination", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=dest)
    if proc.returncode != 0:
        raise ExtensionError(
            f"offline_assets: `{' '.join(cmd[1:])}` failed (exit {proc.returncode}); "
            f"the npm registry must be reachable once to build the book.\n{proc.stderr[-2000:]}")
    packed = json.loads(proc.stdout)  # one entry per spec, in order
    return {spec: entry["filename"] for spec, entry in zip(PACKAGES, packed)}


def _unpack(tarball: Path, inner: str, dest: Path, spec: str) -> None:
    """Copy the file or folder `inner` of an npm tarball to dest (regular files only)."""
    copied = 0
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if (not member.isfile() or ".." in name.parts or name.suffix in SKIP_SUFFIXES
                    or name.name in SKIP_NAMES):
                continue
            if str(name) == inner:
                out = dest
            elif str(name).startswith(inner + "/"):
                out = dest / name.relative_to(inner)
            else:
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(member).read())
            copied += 1
    if copied == 0:
        raise ExtensionError(f"offline_assets: {spec} has no {inner!r}; check PACKAGES.")


def _check_configured_paths(app, target: Path) -> None:
    """Fail early if _config.yml points the pages at a file the assets do not contain."""
    wanted = [app.config.mathjax_path, *app.config.nb_ipywidgets_js]
    for rel in wanted:
        if "://" in rel or rel.startswith("//"):
            raise ExtensionError(
                f"offline_assets: {rel!r} is a remote URL; pages must not need the network. "
                "Point mathjax_path and nb_ipywidgets_js at files under _build/offline_assets.")
        if not (target / rel).is_file():
            raise ExtensionError(
                f"offline_assets: {rel!r} (from _config.yml) is not in {target}; "
                f"the packages provide: {sorted(p.name for p in target.iterdir())}")


def on_config_inited(app, config) -> None:
    target = assets_dir(app)
    ensure_assets(target)
    shutil.copyfile(COMPAT_JS, target / COMPAT_JS.name)
    _check_configured_paths(app, target)
    config.html_static_path = [*config.html_static_path, str(target)]


def setup(app):
    # Before Sphinx's own config-inited check (priority 800) drops missing static paths.
    app.connect("config-inited", on_config_inited, priority=400)
    # Deferred, and after MathJax itself (added per page with priority 500).
    app.add_js_file(COMPAT_JS.name, priority=510, loading_method="defer")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
