"""Cyclic Loop: the Blender side (scene I/O, write-back, exports, headless bake) of the loop solver,
and the "Loop" tab of the 3D viewport sidebar (properties, operators, ui). ``register`` / ``unregister``
are re-exported by the extension's root ``__init__.py``."""


def _modules():
    # Imported here so that the bpy-free modules (solve, worker) can be imported without Blender.
    from . import farm_operator, operators, presets, properties, selection, timeline, ui
    return properties, operators, farm_operator, presets, timeline, selection, ui


def register():
    for module in _modules():
        module.register()


def unregister():
    for module in reversed(_modules()):
        module.unregister()
