"""Differences between the Blender versions the add-on runs in (3.4 legacy add-on .. 4.x extension)."""
import bpy

from .errors import LoopInputError


def move_modifier(obj, modifier, index):
    """Move ``modifier`` of ``obj`` to position ``index`` of its modifier stack.

    ``ObjectModifiers.move`` only exists in newer Blender (4.x); before, the ``modifier_move_to_index``
    operator does it, run on ``obj`` through ``Context.temp_override`` (Blender 3.2+), so it works from
    a modal operator, a script and in background mode alike, whatever object is active.
    """
    current = list(obj.modifiers).index(modifier)
    if current == index:
        return
    if hasattr(obj.modifiers, "move"):
        obj.modifiers.move(current, index)
        return
    with bpy.context.temp_override(object=obj, active_object=obj):
        result = bpy.ops.object.modifier_move_to_index(modifier=modifier.name, index=index)
    if result != {"FINISHED"} or list(obj.modifiers).index(modifier) != index:
        raise LoopInputError(f"could not move the modifier {modifier.name!r} of {obj.name!r} to position {index}")
