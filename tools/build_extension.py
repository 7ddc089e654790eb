"""Build the installable zips: one Blender 4.2+ extension per platform (SciPy wheel bundled) and one
legacy add-on for Blender 3.4+ (which uses the SciPy of Blender's Python, e.g. Debian's python3-scipy).

    python tools/build_extension.py [--platforms linux-x64 ...] [--out dist] [--legacy-only]

The wheels listed in blender_manifest.toml are downloaded with pip into build/wheels (kept as a cache);
the extension zips are made and validated by Blender's own builder (``blender_ext.py`` of the bpy
module, the same code as ``blender --command extension build``). Nothing here imports bpy.

The add-on is the root ``__init__.py`` and the packages cyclic_loop_addon and solver_core (with
solver_core/scenes, so ``python -m solver_core demo nbody`` runs from an installed add-on) and three.js;
benchmarks/, tools/, tests/ and sample_scenes/ stay out.
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("cyclic_loop_addon", "solver_core")
SKIP_DIRS = {"__pycache__"}
# three.js for the web preview page (from `npm ci --prefix web`; MIT), shipped when installed.
THREE_BUILD = os.path.join(ROOT, "web", "node_modules", "three", "build")
THREE_FILES = ("three.core.js", "three.module.js")


def package_files():
    """(source path, path inside the add-on) of everything the add-on needs."""
    files = [(os.path.join(ROOT, "__init__.py"), "__init__.py")]
    for package in PACKAGES:
        for folder, dirs, names in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(names):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    files.append((path, os.path.relpath(path, ROOT)))
    files += [(os.path.join(THREE_BUILD, name), os.path.join("cyclic_loop_addon", "outputs", "three", name))
              for name in THREE_FILES if os.path.isfile(os.path.join(THREE_BUILD, name))]
    return files


def read_manifest():
    with open(os.path.join(ROOT, "blender_manifest.toml"), "rb") as fh:
        return tomllib.load(fh)


def wheel_platform(filename):
    """Blender platform name of a wheel file (windows-x64, macos-arm64, macos-x64, linux-x64)."""
    tag = filename[:-len(".whl")].split("-")[4]
    for key, platform in (("win_amd64", "windows-x64"), ("arm64", "macos-arm64"),
                          ("macosx", "macos-x64"), ("x86_64", "linux-x64"), ("aarch64", "linux-arm64")):
        if key in tag:
            return platform
    raise ValueError(f"unknown platform tag in {filename}")


def fetch_wheel(filename, cache):
    """Path of ``filename`` in ``cache``, downloaded with pip when missing."""
    path = os.path.join(cache, filename)
    if not os.path.exists(path):
        name, version, python, abi, tags = filename[:-len(".whl")].split("-")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps",
                        "--python-version", python[2:3] + "." + python[3:], "--implementation", python[:2],
                        "--abi", abi, "--platform", tags.split(".")[0], f"{name}=={version}", "-d", cache],
                       check=True)
        if not os.path.exists(path):
            raise FileNotFoundError(f"pip did not download {filename}; update the wheels in the manifest")
    return path


def blender_ext():
    """Path of Blender's extension builder inside the installed bpy module."""
    spec = importlib.util.find_spec("bpy")
    if spec is None:
        raise RuntimeError("the bpy module is needed for Blender's extension builder (pip install bpy)")
    base = os.path.dirname(spec.origin)
    for version in sorted(os.listdir(base)):
        path = os.path.join(base, version, "scripts", "addons_core", "bl_pkg", "cli", "blender_ext.py")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no blender_ext.py under {base}")


def staged_manifest(text, platforms, wheels):
    """The manifest text restricted to ``platforms`` and their ``wheels``."""
    text = re.sub(r"^platforms = \[.*?\]", "platforms = [" + ", ".join(f'"{p}"' for p in platforms) + "]",
                  text, count=1, flags=re.M | re.S)
    return re.sub(r"^wheels = \[.*?\]", "wheels = [\n" + "".join(f'  "{w}",\n' for w in wheels) + "]",
                  text, count=1, flags=re.M | re.S)


def build_extension(out, platforms, cache):
    """Build one extension zip per platform into ``out``; return their paths."""
    manifest = read_manifest()
    unknown = set(platforms) - set(manifest["platforms"])
    if unknown:
        raise ValueError(f"platforms {sorted(unknown)} are not in the manifest {manifest['platforms']}")
    wheels = [w for w in manifest["wheels"] if wheel_platform(os.path.basename(w)) in platforms]
    stage = os.path.join(ROOT, "build", "extension")
    shutil.rmtree(stage, ignore_errors=True)
    for src, rel in package_files():
        os.makedirs(os.path.dirname(os.path.join(stage, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(stage, rel))
    os.makedirs(os.path.join(stage, "wheels"))
    for wheel in wheels:
        shutil.copy2(fetch_wheel(os.path.basename(wheel), cache), os.path.join(stage, "wheels"))
    with open(os.path.join(ROOT, "blender_manifest.toml"), encoding="utf-8") as fh:
        text = staged_manifest(fh.read(), platforms, wheels)
    with open(os.path.join(stage, "blender_manifest.toml"), "w", encoding="utf-8") as fh:
        fh.write(text)
    subprocess.run([sys.executable, blender_ext(), "build", "--source-dir", stage, "--output-dir", out,
                    "--split-platforms"], check=True)
    prefix = f"{manifest['id']}-{manifest['version']}-"
    return [os.path.join(out, f"{prefix}{p.replace('-', '_')}.zip") for p in platforms]


def build_legacy(out):
    """The legacy add-on zip (folder ``cyclic_loop/`` with bl_info) for Blender 3.4+; return its path."""
    manifest = read_manifest()
    path = os.path.join(out, f"{manifest['id']}-{manifest['version']}-legacy.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for src, rel in package_files():
            zf.write(src, f"{manifest['id']}/{rel}")
    return path


def main(argv=None):
    manifest = read_manifest()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platforms", nargs="+", default=manifest["platforms"], choices=manifest["platforms"],
                        help="extension platforms to build (default: all in the manifest)")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"), help="output folder")
    parser.add_argument("--wheel-cache", default=os.path.join(ROOT, "build", "wheels"))
    parser.add_argument("--legacy-only", action="store_true", help="only the legacy add-on zip (no download)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.wheel_cache, exist_ok=True)
    built = [] if args.legacy_only else build_extension(os.path.abspath(args.out), args.platforms, args.wheel_cache)
    built.append(build_legacy(args.out))
    for path in built:
        print(path)
    return built


if __name__ == "__main__":
    main()
