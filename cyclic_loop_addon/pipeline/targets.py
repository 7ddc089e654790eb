"""The objects of a loop, remembered by identity: ID pointers in a scene property, which follow renames and
undo. At write-back an object that was deleted, is in Edit Mode or whose mesh changed is refused."""
from ..errors import LoopInputError

TARGETS = "cyclic_loop_targets"     # scene ID property: the objects of the running solve (ID pointers)
LOOPED = "cyclic_loop_looped"       # scene ID property: the object of the last written loop


def remember(scene, key, objects):
    """Store ``objects`` in the scene by identity (they stay found when renamed)."""
    scene[key] = {str(i): ob for i, ob in enumerate(objects)}


def remembered(scene, key):
    """The objects stored by ``remember`` (None for a removed one; the property holds a user of each)."""
    group = scene.get(key)
    return [group.get(str(i)) for i in range(len(group))] if group else []


def target_objects(scene, gathered):
    """The objects ``gathered`` was read from as they are now (by identity, whatever their names), with
    ``gathered.object_names`` updated to their names; LoopInputError when one was deleted, is in Edit Mode
    or no longer has the mesh it was gathered with."""
    objects = remembered(scene, TARGETS)
    if len(objects) != len(gathered.object_names) or any(ob is None or scene.objects.get(ob.name) is not ob
                                                         for ob in objects):
        raise LoopInputError("an object of the loop was deleted while the loop was being made: nothing was "
                             "written; make the loop again")
    for ob in objects:
        if ob.mode == "EDIT":
            raise LoopInputError(f"{ob.name!r} is in Edit Mode: nothing was written (Edit Mode would discard "
                                 "the loop). Leave Edit Mode (Tab) and make the loop again")
        if gathered.kind == "mesh" and (ob.type != "MESH" or len(ob.data.vertices) != gathered.n_written):
            raise LoopInputError(f"the mesh of {ob.name!r} was edited while the loop was being made (it no longer "
                                 f"has its {gathered.n_written} vertices): nothing was written; make the loop again")
    gathered.object_names = [ob.name for ob in objects]
    return objects
