"""Cyclic Loop: the Blender side of the loop solver, and its one registration hub.

Sub-packages: ``pipeline`` (scene -> problem -> solve, in a child Python or a thread), ``outputs`` (shape keys,
caches, VAT, glTF, the web page, file safety), ``report`` (verdict, progress words, seam picture; bpy-free),
``ui`` (the Loop tab), ``jobs`` (farm batch files and templates). ``bake.py`` and ``farm.py`` are the entry
scripts. ``register`` / ``unregister`` here are the only place the add-on registers anything with Blender
(each ui module's own ``register`` in the order below); the extension's root ``__init__.py`` re-exports them."""


def _modules():
    # Imported here so that the bpy-free modules (pipeline.solve, report, jobs) import without Blender.
    from .ui import farm_operator, operators, presets, properties, selection, timeline, panel
    return properties, operators, farm_operator, presets, timeline, selection, panel


def register():
    for module in _modules():
        module.register()


def unregister():
    for module in reversed(_modules()):
        module.unregister()
