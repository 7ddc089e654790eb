"""Bake on Farm in the bpy module: the batch file it writes for the selected objects reads back (farm.py's
reader) as the tasks the panel's settings describe; without a saved .blend it refuses and writes nothing."""

import pytest

bpy = pytest.importorskip("bpy")

import blender_helpers as bh  # noqa: E402  (puts the repository on sys.path)
import cyclic_loop_addon  # noqa: E402
from cyclic_loop_addon.jobs import batch  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered():
    cyclic_loop_addon.register()
    yield
    cyclic_loop_addon.unregister()


def _select(names):
    for ob in bpy.context.scene.objects:
        ob.select_set(ob.name in names)
    bpy.context.view_layer.objects.active = bpy.data.objects[names[0]]


def test_writes_the_batch_of_the_selected_object_with_its_panel_settings(tmp_path):
    bh.open_sample("flag", str(tmp_path))
    _select(["Flag"])
    settings = bpy.data.objects["Flag"].cyclic_loop_settings
    bpy.ops.cyclic_loop.physics_defaults()
    settings.frame_start, settings.frame_end = 49, 60
    settings.init, settings.max_iters, settings.output = "cache", 7, "PC2"
    settings.hard_initial, settings.soft_weight = False, 0.01
    settings.keep_motion = False
    path = tmp_path / "flag_farm.toml"
    assert bpy.ops.cyclic_loop.bake_on_farm(filepath=str(path)) == {"FINISHED"}
    tasks = batch.load(path).tasks()
    assert [t.name for t in tasks] == ["flag-Flag-panel1"]
    task = tasks[0]
    assert task.scene == str(tmp_path / "flag.blend") and task.frames == (49, 60)
    assert task.outputs == {"pc2": str(tmp_path / "loops" / "flag-Flag-panel1.pc2")}
    assert task.options == dict(model="blender_cloth", init="cache", scheme="auto", substeps=settings.substeps,
                                iterations=7, soft=0.01, pin_group=settings.pin_group, colliders="", gusts=True,
                                keep_motion=False)
    assert "--gusts" in task.bake_args() and "--no-keep-motion" in task.bake_args()


def test_n_bodies_are_one_task_of_all_selected(tmp_path):
    bh.open_sample("planets", str(tmp_path))
    _select(["Sun", "Planet", "Moonlet"])
    for name in ("Sun", "Planet", "Moonlet"):
        bpy.data.objects[name].cyclic_loop_settings.model = "nbody"
    path = tmp_path / "planets_farm.toml"
    assert bpy.ops.cyclic_loop.bake_on_farm(filepath=str(path)) == {"FINISHED"}
    tasks = batch.load(path).tasks()
    assert [(t.objects, t.outputs) for t in tasks] == [
        ("Sun,Planet,Moonlet", {"blend": str(tmp_path / "loops" / "planets-Sun+Planet+Moonlet-panel1.blend")})]
    assert tasks[0].options["gravitational_constant"] == 1.0


def test_refuses_an_unsaved_scene_and_writes_nothing(tmp_path):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.mesh.primitive_plane_add()
    path = tmp_path / "farm.toml"
    with pytest.raises(RuntimeError, match="save the .blend first"):
        bpy.ops.cyclic_loop.bake_on_farm(filepath=str(path))
    assert not path.exists()


# bake.py with its defaults on the flag sample (70 vertices, its loop frames 49-72 on the frame grid, the
# designed gusts: 13 Gauss–Newton iterations), the child's peak resident size from os.wait4 in the bpy module
# (`python -m benchmarks motion --cases readme`, 28 November 2026)
FLAG_DEFAULTS_PEAK_BYTES = int(0.47 * 2 ** 30)


def test_probe_sizes_a_cloth_as_bake_py_solves_it(tmp_path):
    """The farm probe gives a Blender cloth bake.py's default solve: one step per frame (not its quality 4)
    over the scene's loop frames (49-72, not the scene's 1-72). Its memory requirement is the solve's order of
    magnitude against the 0.47 GiB measured; from the quality and the scene range it had been 4 x 72 / 24 = 12
    times the unknowns."""
    from cyclic_loop_addon.jobs import probe, openjd
    bh.open_sample("flag", str(tmp_path))
    size = probe.sizes(["Flag"])["Flag"]
    assert (size["substeps"], size["physics_substeps"], size["frames"]) == (1, 4, [49, 72])
    mib = openjd.memory_mib(size, size["frames"], {})
    assert 0.7 * FLAG_DEFAULTS_PEAK_BYTES <= mib * openjd.MIB <= 1.4 * FLAG_DEFAULTS_PEAK_BYTES
