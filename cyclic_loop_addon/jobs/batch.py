"""The batch file (TOML): scenes, objects, frame ranges and settings variants; read with ``load`` (Python
3.11+, tomllib), written with ``dumps`` (any Python: Blender's own writes it). No bpy.

    [batch]
    name = "flags"
    output_dir = "loops"              # relative to the batch file
    outputs = ["blend", "pc2"]        # any of blend, abc, pc2, preview, vat, glb, html; the JSON report is always written
    blender = "blender"               # the Blender executable of local runs and of the job files
    bake = true                       # bake a physics cache missing at the shared path on the worker

    [variants.draft]                  # bake.py options: model, init, scheme, substeps, iterations, tol,
    init = "cache"                    # physics_tol, soft, pin_group, colliders, gravitational_constant,
                                      # gusts, keep_motion (true / false)
    iterations = 4

    [[scene]]
    file = "flag.blend"               # relative to the batch file
    objects = ["Flag", "Sun,Planet"]  # one task per object and variant; "A,B" loops N bodies together
    frames = [49, 72]
    variants = ["draft"]              # default: every variant

An ``objects`` entry is a string (one object, or "A,B": the N bodies A and B looped together) or a list
of exact names (["Sun", "Planet"]: one N-body task); a name holding a comma is given as a one-name list,
["Flag,with,commas"], so a comma in a name is never read as a separator. A task passes bake.py an option
value that starts with "-" as ``--option=VALUE``, so a name such as "-b" is never read as an option.
"""
import os
import re
from dataclasses import dataclass, field

from ..outputs.catalog import PRODUCTS

OUTPUT_EXTENSIONS = {out.kind: out.extension for out in PRODUCTS}
OUTPUT_OPTIONS = {out.kind: "--" + out.name for out in PRODUCTS}
VARIANT_TYPES = {"model": str, "init": str, "scheme": str, "substeps": int, "iterations": int, "tol": float,
                 "physics_tol": float, "soft": float, "pin_group": str, "colliders": str,
                 "gravitational_constant": float, "gusts": bool, "keep_motion": bool}
DEFAULT_VARIANT = "default"
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list"}


class BatchError(ValueError):
    """The batch file cannot be used; the message says what to change."""


@dataclass
class Task:
    """One bake.py run: ``objects`` (comma-separated for N bodies; ``names`` the exact object names) of
    ``scene`` with one variant."""
    name: str
    scene: str
    objects: str
    frames: tuple
    variant: str
    options: dict
    outputs: dict          # kind (OUTPUT_EXTENSIONS) -> absolute path
    report: str
    bake: bool
    names: tuple = ()

    def output_paths(self):
        return list(self.outputs.values())

    def bake_args(self, skip_existing=True, joined=False):
        """bake.py's options for this task (what follows ``--``).

        Parameters
        ----------
        skip_existing : bool
            Add ``--skip-existing`` (a finished task is not baked again).
        joined : bool
            Pass the objects as ``--object=VALUE`` whatever the value (a template placeholder, unknown here).

        Returns
        -------
        list of str
            The arguments; a value starting with "-" always as ``--option=VALUE``; N bodies with a comma in
            a name as one ``--object=NAME`` per name.
        """
        names = self.names or (self.objects,)
        if len(names) > 1 and any("," in name for name in names):
            args = [f"--object={name}" for name in names]
        else:
            args = option("--object", self.objects, joined)
        if self.frames:
            args += ["--frames", str(self.frames[0]), str(self.frames[1])]
        for kind, path in self.outputs.items():
            args += option(OUTPUT_OPTIONS[kind], path)
        args += option("--json", self.report)
        for key, value in self.options.items():
            flag = key.replace("_", "-")
            if isinstance(value, bool):         # bake.py's switches: --gusts / --no-gusts
                args.append(f"--{flag}" if value else f"--no-{flag}")
            else:
                args += option("--" + flag, str(value))
        return args + ["--bake"] * self.bake + ["--skip-existing"] * skip_existing


def option(name, value, joined=False):
    """``[name, value]``, or ``[name=value]`` when ``value`` starts with "-" (or ``joined``), so that
    argparse never reads a value as an option."""
    return [f"{name}={value}"] if joined or value.startswith("-") else [name, value]


@dataclass
class Scene:
    """One ``[[scene]]`` entry: a .blend, the objects to loop in it, their frames and variants."""
    file: str
    objects: list
    frames: tuple
    variants: list

    @property
    def stem(self):
        return safe_name(os.path.splitext(os.path.basename(self.file))[0])


@dataclass
class Batch:
    """A parsed batch file; paths absolute."""
    name: str
    output_dir: str
    outputs: list
    blender: str
    bake: bool
    variants: dict
    scenes: list = field(default_factory=list)

    def tasks(self):
        """Every (object, variant) of every scene as a Task, in file order."""
        tasks, names = [], set()
        for scene in self.scenes:
            for variant in scene.variants:
                for group in scene.objects:
                    obj = ",".join(group)
                    # "+" joins the bodies; a comma inside a name becomes "_", as in the Flamenco job type
                    name = task_name(scene.stem, "+".join(n.replace(",", "_") for n in group), variant)
                    if name in names:
                        raise BatchError(f"two tasks are named {name}: give the scenes or objects distinct names")
                    names.add(name)
                    base = os.path.join(self.output_dir, name)
                    tasks.append(Task(name=name, scene=scene.file, objects=obj, frames=scene.frames,
                                      variant=variant, options=dict(self.variants[variant]),
                                      outputs={k: base + OUTPUT_EXTENSIONS[k] for k in self.outputs},
                                      report=base + ".json", bake=self.bake, names=group))
        return tasks


def safe_name(text):
    """``text`` with everything but letters, digits and ._+- replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


def task_name(scene_stem, obj, variant):
    return safe_name(f"{scene_stem}-{obj.replace(',', '+')}-{variant}")


def _section(data, key, where):
    """``data[key]`` when it is a table (or missing: an empty one); BatchError otherwise."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise BatchError(f"{where} should be a table ([{key}] ...), got {value!r}")
    return value


def _get(table, key, kind, where, default=None):
    value = table.get(key, default)
    if value is None:
        raise BatchError(f"{where}: {key} is missing")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BatchError(f"{where}: {key} should be {TYPE_NAMES[kind]}, got {value!r}")
    return value


def _variants(data):
    variants = data.get("variants", {DEFAULT_VARIANT: {}})
    if not isinstance(variants, dict) or not variants:
        raise BatchError("[variants.NAME] tables expected (or none at all for bake.py's defaults)")
    out = {}
    for name, options in variants.items():
        if not isinstance(options, dict):
            raise BatchError(f"variants.{name} should be a table ([variants.{name}] with bake.py options), "
                             f"got {options!r}")
        unknown = set(options) - set(VARIANT_TYPES)
        if unknown:
            raise BatchError(f"[variants.{name}]: unknown setting {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(VARIANT_TYPES)}")
        out[name] = {k: _get(options, k, VARIANT_TYPES[k], f"[variants.{name}]") for k in options}
    return out


def object_names(given, objects):
    """The object names of ``--object`` values (bake.py) or of a probe's specs: a value naming an object is
    that object (a comma may be part of a name), otherwise "A,B" is several objects (N bodies).

    Parameters
    ----------
    given : iterable of str
        The values as given.
    objects : container of str
        The scene's object names (``bpy.data.objects`` or any container supporting ``in``).

    Returns
    -------
    tuple of str
        The names, empty ones left out.
    """
    return tuple(n for arg in given for n in ([arg] if arg in objects else arg.split(",")) if n)


def _object_entry(entry):
    """The exact names of one ``objects`` entry ("A" or "A,B": split on commas; a list: as it is), or None
    when it is neither a non-empty string nor a non-empty list of non-empty names."""
    if isinstance(entry, str):
        names = tuple(n for n in entry.split(",") if n)
    elif isinstance(entry, list) and all(isinstance(n, str) for n in entry):
        names = tuple(entry)
    else:
        return None
    return names if names and all(names) else None


def _scene(entry, i, folder, variants):
    where = f"[[scene]] {i + 1}"
    if not isinstance(entry, dict):
        raise BatchError(f"{where} should be a table ([[scene]] with file and objects), got {entry!r}")
    path = os.path.normpath(os.path.join(folder, _get(entry, "file", str, where)))
    if not os.path.isfile(path):
        raise BatchError(f"{where}: no such .blend file: {path}")
    objects = [_object_entry(o) for o in _get(entry, "objects", list, where)]
    if not objects or None in objects:
        raise BatchError(f"{where}: objects should be a list of object names (\"A,B\" or [\"A\", \"B\"] for N "
                         "bodies looped together)")
    frames = entry.get("frames")
    if frames is not None and not (isinstance(frames, list) and len(frames) == 2
                                   and all(isinstance(f, int) for f in frames) and frames[0] < frames[1]):
        raise BatchError(f"{where}: frames should be [first, last] with first < last, got {frames!r}")
    names = _get(entry, "variants", list, where, default=list(variants))
    if not all(isinstance(n, str) for n in names):
        raise BatchError(f"{where}: variants should be a list of [variants.NAME] names, got {names!r}")
    missing = [n for n in names if n not in variants]
    if missing:
        raise BatchError(f"{where}: no [variants.{missing[0]}] table; defined: {', '.join(variants)}")
    return Scene(file=path, objects=list(objects), frames=tuple(frames) if frames else None, variants=names)


def parse(data, folder):
    """A Batch from the parsed TOML ``data``; relative paths are relative to ``folder``."""
    head = _section(data, "batch", "[batch]")
    outputs = _get(head, "outputs", list, "[batch]", default=["blend"])
    unknown = [o for o in outputs if not isinstance(o, str) or o not in OUTPUT_EXTENSIONS]
    if unknown or not outputs:
        raise BatchError(f"[batch]: outputs should be some of {', '.join(OUTPUT_EXTENSIONS)}, got {outputs!r}")
    out_dir = os.path.normpath(os.path.join(folder, _get(head, "output_dir", str, "[batch]", default="loops")))
    variants = _variants(data)
    scenes = data.get("scene")
    if not scenes:
        raise BatchError("no [[scene]] entries: give at least one scene with its objects")
    if not isinstance(scenes, list):
        raise BatchError(f"scene should be [[scene]] tables, each with file and objects, got {scenes!r}")
    batch = Batch(name=_get(head, "name", str, "[batch]", default="cyclic-loop"), output_dir=out_dir,
                  outputs=list(dict.fromkeys(outputs)), blender=_get(head, "blender", str, "[batch]", "blender"),
                  bake=_get(head, "bake", bool, "[batch]", default=False), variants=variants,
                  scenes=[_scene(s, i, folder, variants) for i, s in enumerate(scenes)])
    batch.tasks()  # names must be distinct
    return batch


def load(path):
    """Read and check the batch file at ``path``; raise BatchError with what to change."""
    import tomllib
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise BatchError(f"no such batch file: {path}") from None
    except IsADirectoryError:
        raise BatchError(f"the batch file {path} is a folder; give the .toml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"cannot read the batch file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BatchError(f"{path} is not valid TOML: {exc}") from None
    return parse(data, os.path.dirname(os.path.abspath(path)))


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _table(lines, header, values):
    lines.append(header)
    lines += [f"{key} = {_toml_value(value)}" for key, value in values.items() if value is not None]
    lines.append("")


def dumps(head, variants, scenes):
    """TOML text of a batch: ``head`` the [batch] keys, ``variants`` name -> options, ``scenes`` a list of
    dicts (file, objects, frames, variants)."""
    lines = ["# Cyclic Loop batch: farm.py list / run / openjd this file (see the README, Farm)", ""]
    _table(lines, "[batch]", head)
    for name, options in variants.items():
        _table(lines, f"[variants.{_toml_value(name)}]", options)
    for scene in scenes:
        _table(lines, "[[scene]]", scene)
    return "\n".join(lines)
