"""Print the project's structure as its own imports show it: one node per module folder (``solver_core/optimize``,
``cyclic_loop_addon/ui``, ...) and an arrow for every folder whose modules import another's, with the count
of import statements, as a Mermaid flowchart (GitHub renders it) or as plain text.

    python tools/import_graph.py [--text] [--files] [ROOT]

``--files`` draws modules instead of folders. Reads the source with ``ast``; runs none of it.
"""
import argparse
import ast
import collections
import os
import sys

PACKAGES = ("solver_core", "cyclic_loop_addon", "benchmarks")


def modules(root):
    """{dotted module name: path} of every .py file under the project's packages."""
    found = {}
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, name), root)[:-3].replace(os.sep, ".")
                    found[rel[:-9] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
    return found


def imports(path, module, known):
    """The project modules that ``module`` (at ``path``) imports, one entry per import statement target."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append(sub if sub in known else base)
    return [name for name in out if name.split(".")[0] in PACKAGES]


def folder_of(module, known, root):
    """The folder (package path) a module lives in: ``solver_core/optimize`` for solver_core.optimize.linsolve."""
    path = known.get(module)
    if path is None:
        return None
    return os.path.relpath(os.path.dirname(path), root).replace(os.sep, "/")


def graph(root, files=False):
    """(nodes, {(a, b): count}) of the folder (or module) import graph."""
    known = modules(root)
    edges = collections.Counter()
    for module, path in known.items():
        a = module if files else folder_of(module, known, root)
        for target in imports(path, module, known):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if not target:
                continue
            b = target if files else folder_of(target, known, root)
            if b != a:
                edges[a, b] += 1
    nodes = sorted({m if files else folder_of(m, known, root) for m in known})
    return nodes, edges


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--text", action="store_true", help="plain text instead of Mermaid")
    parser.add_argument("--files", action="store_true", help="one node per module instead of per folder")
    args = parser.parse_args(argv)
    nodes, edges = graph(args.root, args.files)
    if args.text:
        for node in nodes:
            targets = ", ".join(f"{b} ({n})" for (a, b), n in sorted(edges.items()) if a == node)
            print(f"{node} -> {targets or '-'}")
        return 0
    ids = {node: f"n{i}" for i, node in enumerate(nodes)}
    print("flowchart TD")
    for node in nodes:
        print(f'  {ids[node]}["{node}"]')
    for (a, b), n in sorted(edges.items()):
        print(f"  {ids[a]} -->|{n}| {ids[b]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
