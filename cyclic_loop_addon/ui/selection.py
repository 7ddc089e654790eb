"""What the selection allows: why Make Loop cannot run on it (said in the panel, before any click), and
settings that are true as soon as an object is selected (read from its physics modifier) with the last
run's message cleared when the selection changes."""
import bpy

from .properties import fill_from_physics
from ..pipeline.scene_reader import physics_modifier
from ..outputs.writeback import MARKER

_owner = object()       # the message-bus subscription's owner


def problem(context):
    """Why the selection cannot be looped, in words, or None when Make Loop can run."""
    obj = context.active_object
    if obj is None:
        return "Select the simulated mesh (a mesh with Cloth or Soft Body)"
    if obj.type != "MESH":
        return f"{obj.name} is a {obj.type.lower()}: select a mesh with Cloth or Soft Body"
    if obj.mode == "EDIT":
        return f"{obj.name} is in Edit Mode: press Tab to leave it"
    mod = physics_modifier(obj)
    several = len(context.selected_objects) > 1
    if mod is None and obj.cyclic_loop_settings.model != "nbody" and not several:
        if any(m.type == "COLLISION" for m in obj.modifiers):
            return f"{obj.name} is a collider: select the cloth or soft body that hits it"
        bodies = _animated_meshes(context.scene)
        if obj in bodies and len(bodies) > 1:
            return (f"{obj.name} is one of {len(bodies)} moving bodies: select all of them (A) to loop them "
                    "together as N bodies")
        return f"{obj.name} has no Cloth or Soft Body to loop: add one and bake it, or select the simulated mesh"
    if obj.get(MARKER) is not None:
        return f"{obj.name} loops already: Restore Simulation (Last Run) to make it again"
    if mod is not None and not mod.show_viewport:
        return f"the {mod.name} of {obj.name} is off in the viewport: turn it on"
    return None


def _animated_meshes(scene):
    """The scene's meshes without physics whose motion is keyed: the bodies an N-body loop is made of."""
    return [ob for ob in scene.objects if ob.type == "MESH" and physics_modifier(ob) is None
            and ob.animation_data is not None and ob.animation_data.action is not None]


def prepare(context):
    """The active object changed: fill its settings from its physics (once) and clear the last message."""
    scene, obj = context.scene, context.active_object
    run = scene.cyclic_loop_run
    if run.running:
        return
    run.message = ""
    if obj is not None and obj.type == "MESH" and not obj.cyclic_loop_settings.initialized \
            and physics_modifier(obj) is not None:
        fill_from_physics(obj.cyclic_loop_settings, obj, scene)


def _active_changed():
    if bpy.context.scene is not None:
        prepare(bpy.context)


def _subscribe():
    bpy.msgbus.clear_by_owner(_owner)
    bpy.msgbus.subscribe_rna(key=(bpy.types.LayerObjects, "active"), owner=_owner, args=(),
                             notify=_active_changed)


@bpy.app.handlers.persistent
def _after_load(_dummy):
    """Subscriptions do not survive loading a file; the file's active object is selected already."""
    _subscribe()
    _active_changed()


def _first():
    _after_load(None)


def register():
    # Only with an interface: without one nobody selects, the message bus never notifies and timers never
    # fire (and a timer or subscription left at exit hangs the bpy 4.5 module's exit).
    if bpy.app.background:
        return
    _subscribe()
    bpy.app.handlers.load_post.append(_after_load)
    bpy.app.timers.register(_first, first_interval=0.0)     # the open file's active object (no data access here)


def unregister():
    if bpy.app.background:
        return
    if bpy.app.timers.is_registered(_first):
        bpy.app.timers.unregister(_first)
    bpy.app.handlers.load_post.remove(_after_load)
    bpy.msgbus.clear_by_owner(_owner)
