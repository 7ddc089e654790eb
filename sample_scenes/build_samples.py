"""Build the sample .blend files: Blender's own cloth, soft body and force fields, caches baked.

    python sample_scenes/build_samples.py [--out DIR] [NAME ...]        (bpy module)
    blender -b --python sample_scenes/build_samples.py -- [--out DIR] [NAME ...]

NAME: flag, flag_gusts, swing, softbody, ribbons, planets (default: all). Scenes are small (32-70
vertices, 48-96 cached frames at 24 fps) so the loop solver stays fast; each file notes in its scene custom
property ``loop_frames`` a good range to loop.
"""
import argparse
import math
import os
import sys

import bpy
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _empty_scene(frames):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    scene.render.fps = 24
    return scene


def _grid(name, nx, ny, size_x, size_y):
    """A flat grid of nx * ny vertices in the XY plane, centred at the origin."""
    x, y = np.meshgrid(np.linspace(-size_x / 2, size_x / 2, nx), np.linspace(-size_y / 2, size_y / 2, ny))
    verts = np.column_stack([x.ravel(), y.ravel(), np.zeros(x.size)])
    idx = np.arange(nx * ny).reshape(ny, nx)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], axis=-1).reshape(-1, 4)
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata(verts.tolist(), [], quads.tolist())
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj, verts


def _set_vertices(obj, verts):
    obj.data.vertices.foreach_set("co", np.asarray(verts, dtype=np.float32).ravel())
    obj.data.update()


def _pin_group(obj, indices, name="Pin"):
    group = obj.vertex_groups.new(name=name)
    group.add([int(i) for i in indices], 1.0, "REPLACE")
    return group


def _cloth(obj, pin_group, frames, quality=4, **settings):
    mod = obj.modifiers.new("Cloth", "CLOTH")
    s = mod.settings
    s.quality = quality
    s.vertex_group_mass = pin_group
    for key, value in settings.items():
        setattr(s, key, value)
    mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames
    return mod


def _bake(obj, mod):
    with bpy.context.temp_override(scene=bpy.context.scene, active_object=obj, object=obj,
                                   point_cache=mod.point_cache):
        bpy.ops.ptcache.bake(bake=True)
    assert mod.point_cache.is_baked, f"baking {obj.name} failed"


def _fcurves(obj):
    """The F-curves of the object's action (a layered action since Blender 4.4)."""
    anim = obj.animation_data
    if hasattr(anim.action, "layers"):
        return anim.action.layers[0].strips[0].channelbag(anim.action_slot).fcurves
    return anim.action.fcurves


def _cyclic_keys(obj, path, frames, values):
    """Keyframes (linear) of ``values`` (F, 3) on ``obj.path`` at ``frames``, repeating forever."""
    for frame, value in zip(frames, values):
        setattr(obj, path, value)
        obj.keyframe_insert(path, frame=float(frame))
    for fc in _fcurves(obj):
        for key in fc.keyframe_points:
            key.interpolation = "LINEAR"
        fc.modifiers.new("CYCLES")


def _mesh_object(name, op, **kwargs):
    op(**kwargs)
    obj = bpy.context.active_object
    obj.name = name
    return obj


def flag():
    """A 10 x 7 flag on a post, blown by a Wind force field at an angle to it: in this steady wind it
    settles and then sways, so its only physical loop is near rest."""
    frames = 72
    scene = _empty_scene(frames)
    obj, verts = _grid("Flag", 10, 7, 1.5, 0.9)
    verts = verts[:, [0, 2, 1]] + [0.75, 0.0, 2.0]           # vertical, in the XZ plane, left edge at x = 0
    _set_vertices(obj, verts)
    _pin_group(obj, np.flatnonzero(verts[:, 0] < 1e-6))
    mod = _cloth(obj, "Pin", frames, quality=4, mass=0.15, air_damping=1.0, tension_stiffness=15.0,
                 compression_stiffness=15.0, shear_stiffness=5.0, bending_stiffness=0.5)
    _mesh_object("Post", bpy.ops.mesh.primitive_cylinder_add, vertices=8, radius=0.03, depth=2.6,
                 location=(-0.03, 0.0, 1.3))
    bpy.ops.object.effector_add(type="WIND", location=(-1.0, 0.0, 2.0), rotation=(0.0, math.pi / 2, 0.6))
    wind = bpy.context.active_object
    wind.name = "Wind"
    wind.field.strength = 10.0
    _bake(obj, mod)
    scene["loop_frames"] = [49, 72]
    return "flag"


GUST_PERIOD = 24                    # frames of one gust cycle (1 s at 24 fps)
GUST_STRENGTH = (0.0, 200.0)        # the wind's strength between gusts and at a gust's peak


def flag_gusts():
    """A 10 x 7 flag hung from a bar by its top edge, in gusts: a Wind field across it whose strength is
    keyed from calm to gust and back every GUST_PERIOD frames (smooth keys, a Cycles modifier), so the flag
    waves out and falls back, and after two gusts its motion repeats: a physical loop of that period exists.

    Hung from its top edge, gravity pulls the flag back after each gust; on a vertical post (the ``flag``
    sample) its swing about the post has no restoring force under Blender's wind (a pressure on the
    cloth's normal): in gusts of 0-60 it still drifted by as much as it waved after six periods (10.8 cm
    against 10.2)."""
    frames = 3 * GUST_PERIOD
    scene = _empty_scene(frames)
    obj, verts = _grid("Flag", 10, 7, 1.5, 0.9)
    verts = verts[:, [0, 2, 1]] + [0.0, 0.0, 2.0]            # vertical, in the XZ plane, top edge at z = 2.45
    _set_vertices(obj, verts)
    _pin_group(obj, np.flatnonzero(verts[:, 2] > verts[:, 2].max() - 1e-6))
    mod = _cloth(obj, "Pin", frames, quality=4, mass=0.15, air_damping=3.0, tension_stiffness=15.0,
                 compression_stiffness=15.0, shear_stiffness=5.0, bending_stiffness=0.5)
    _mesh_object("Bar", bpy.ops.mesh.primitive_cylinder_add, vertices=8, radius=0.02, depth=1.7,
                 location=(0.0, 0.0, 2.47), rotation=(0.0, math.pi / 2, 0.0))
    bpy.ops.object.effector_add(type="WIND", location=(0.0, -1.0, 2.0), rotation=(-math.pi / 2, 0.0, 0.0))
    wind = bpy.context.active_object                        # blowing along +Y, across the flag
    wind.name = "Wind"
    low, high = GUST_STRENGTH
    for frame, strength in zip(1 + np.arange(3) * GUST_PERIOD // 2, (low, high, low)):
        wind.field.strength = strength
        wind.keyframe_insert("field.strength", frame=float(frame))
    _fcurves(wind)[0].modifiers.new("CYCLES")
    _bake(obj, mod)
    scene["loop_frames"] = [frames - GUST_PERIOD + 1, frames]
    return "flag_gusts"


def swing():
    """An 8 x 8 sheet pinned at two corners, released flat: it swings down and back."""
    frames = 48
    scene = _empty_scene(frames)
    obj, verts = _grid("Sheet", 8, 8, 1.0, 1.0)
    _set_vertices(obj, verts + [0.0, 0.0, 1.5])
    corners = np.flatnonzero((verts[:, 1] > 0.49) & (np.abs(verts[:, 0]) > 0.49))
    _pin_group(obj, corners)
    mod = _cloth(obj, "Pin", frames, quality=4, mass=0.2, air_damping=0.5, bending_stiffness=0.2)
    _bake(obj, mod)
    scene["loop_frames"] = [17, 48]
    return "swing"


def softbody():
    """A 42-vertex ball with a Soft Body modifier dropped on a floor with a Collision modifier."""
    frames = 48
    scene = _empty_scene(frames)
    ball = _mesh_object("Ball", bpy.ops.mesh.primitive_ico_sphere_add, subdivisions=2, radius=0.3,
                        location=(0.0, 0.0, 1.0))
    floor = _mesh_object("Floor", bpy.ops.mesh.primitive_plane_add, size=3.0)
    floor.modifiers.new("Collision", "COLLISION")
    mod = ball.modifiers.new("Softbody", "SOFT_BODY")
    sb = ball.soft_body
    sb.use_goal = False
    sb.mass, sb.friction, sb.pull, sb.push, sb.damping, sb.bend = 1.0, 0.5, 0.9, 0.9, 0.5, 0.5
    mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames
    _bake(ball, mod)
    scene["loop_frames"] = [13, 44]
    return "softbody"


def ribbons():
    """Two 2 x 8 ribbons hanging from a handle that circles every 24 frames."""
    frames = 48
    scene = _empty_scene(frames)
    bpy.ops.object.empty_add(type="PLAIN_AXES", location=(0.0, 0.0, 2.0))
    handle = bpy.context.active_object
    handle.name = "Handle"
    t = np.arange(25) / 24.0
    _cyclic_keys(handle, "location", 1 + np.arange(25),
                 np.column_stack([0.4 * np.cos(2 * np.pi * t), 0.4 * np.sin(2 * np.pi * t), np.full(25, 2.0)]))
    strips = []
    for offset in (-0.15, 0.15):
        x, z = np.meshgrid([offset - 0.05, offset + 0.05], -np.linspace(0.0, 1.05, 8))
        strips.append(np.column_stack([x.ravel(), np.zeros(x.size), z.ravel()]))
    verts = np.concatenate(strips)
    quads = []
    for s in range(2):
        base = 16 * s
        quads += [[base + 2 * r, base + 2 * r + 1, base + 2 * r + 3, base + 2 * r + 2] for r in range(7)]
    mesh = bpy.data.meshes.new("Ribbons")
    mesh.from_pydata(verts.tolist(), [], quads)
    obj = bpy.data.objects.new("Ribbons", mesh)
    scene.collection.objects.link(obj)
    obj.parent = handle
    _pin_group(obj, np.flatnonzero(verts[:, 2] > -1e-6))
    mod = _cloth(obj, "Pin", frames, quality=4, mass=0.1, air_damping=1.0, bending_stiffness=0.1)
    _bake(obj, mod)
    scene["loop_frames"] = [25, 48]
    return "ribbons"


def planets():
    """A sun and two planets (custom property ``mass``, G = 1) keyframed from a leapfrog integration."""
    frames = 96
    scene = _empty_scene(frames)
    masses = np.array([80.0, 1.0, 0.5])
    radii = np.array([0.0, 2.0, 2.0 * 2 ** (2 / 3)])           # orbital periods 2 s and 4 s
    x = np.column_stack([radii, np.zeros(3), np.zeros(3)])
    v = np.column_stack([np.zeros(3), np.r_[0.0, np.sqrt(masses[0] / radii[1:])], np.zeros(3)])
    v[0] = -(masses[1:, None] * v[1:]).sum(axis=0) / masses[0]
    substeps, dt = 20, 1.0 / scene.render.fps

    def accel(x):
        d = x[None, :, :] - x[:, None, :]
        r3 = np.linalg.norm(d, axis=-1) ** 3 + np.eye(3)
        return (masses[None, :, None] * d / r3[..., None]).sum(axis=1)

    path = [x.copy()]
    h = dt / substeps
    for _ in range(frames - 1):
        for _ in range(substeps):
            v += 0.5 * h * accel(x)
            x += h * v
            v += 0.5 * h * accel(x)
        path.append(x.copy())
    path = np.array(path)
    for i, (name, size) in enumerate((("Sun", 0.3), ("Planet", 0.12), ("Moonlet", 0.08))):
        body = _mesh_object(name, bpy.ops.mesh.primitive_ico_sphere_add, subdivisions=1, radius=size)
        body["mass"] = float(masses[i])
        for frame, location in enumerate(path[:, i], start=1):
            body.location = location
            body.keyframe_insert("location", frame=frame)
    scene["loop_frames"] = [1, 96]
    return "planets"


SAMPLES = {f.__name__: f for f in (flag, flag_gusts, swing, softbody, ribbons, planets)}


def build(names, out):
    """Build and save the named samples into folder ``out``; returns the written paths."""
    paths = []
    for name in names:
        SAMPLES[name]()
        path = os.path.join(out, f"{name}.blend")
        bpy.ops.wm.save_as_mainfile(filepath=path, compress=True)
        paths.append(path)
        print(f"built {path} ({os.path.getsize(path) // 1024} KiB)", flush=True)
    return paths


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(SAMPLES))
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(SAMPLES)
    if unknown:
        parser.error(f"unknown sample {', '.join(sorted(unknown))}; choose from {', '.join(SAMPLES)}")
    out = os.path.abspath(args.out)     # Blender resolves a relative path against its own folder, not ours
    if not os.path.isdir(out):
        parser.error(f"--out {args.out}: folder {out} does not exist; create it first")
    build(args.names or list(SAMPLES), out)


if __name__ == "__main__":
    if "--" in sys.argv:
        main(sys.argv[sys.argv.index("--") + 1:])
    else:
        main([] if bpy.app.binary_path else sys.argv[1:])
