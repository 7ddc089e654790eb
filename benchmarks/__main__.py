"""Run one benchmark: ``python -m benchmarks NAME [options]``; ``python -m benchmarks NAME --help`` gives
its options."""
import ast
import os
import sys
import time
from importlib import import_module

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> what it needs beyond numpy and SciPy
BENCHMARKS = {
    "nbody": "",
    "table1": "",
    "speed": "CHOLMOD",
    "fast_projection": "",
    "forward_cost": "",
    "figures": "matplotlib",
    "structured_blender": "CHOLMOD",
    "blender_cloth": "bpy module",
    "blender_cloth_residual": "bpy module",
    "coarse_to_fine": "bpy module",
    "flag_model_fit": "bpy module",
    "assembly": "bpy module",
    "motion": "bpy module",
    "force_budget": "bpy module",
    "scale": "bpy module to gather, CHOLMOD",
    "circulant": "bpy module to gather, CHOLMOD",
    "panel_estimates": "bpy module to gather",
    "engines_vat": "bpy module, godot3-server",
    "glb_sizes": "bpy module",
}


def summary(name):
    """The first line of benchmark ``name``'s docstring, read without importing it (bpy may be missing)."""
    with open(os.path.join(HERE, f"{name}.py"), encoding="utf-8") as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or ""
    return doc.splitlines()[0] if doc else ""


def usage():
    lines = ["usage: python -m benchmarks NAME [options]   (python -m benchmarks NAME --help: its options)", "",
             "Run from the repository root. Benchmarks:"]
    for name, needs in BENCHMARKS.items():
        lines.append(f"  {name:<23} {summary(name)}" + (f" [{needs}]" if needs else ""))
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    import_module(f"benchmarks.{name}").main(rest)
    print(f"done in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
