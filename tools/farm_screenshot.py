"""Screenshot of the Loop tab with its Bake on Farm button (docs/farm_button.png), in a real Blender window:

    xvfb-run -a -s "-screen 0 1280x900x24" blender --enable-event-simulate --window-geometry 0 0 1280 900 \\
        FLAG.blend --python tools/farm_screenshot.py -- ADDON_ZIP OUT.png

ADDON_ZIP: the legacy zip of tools/build_extension.py --legacy-only; FLAG.blend: the flag
sample built by this Blender (sample_scenes/build_samples.py). Set BLENDER_USER_SCRIPTS and
BLENDER_USER_CONFIG to empty folders so the user's own add-ons and preferences stay out of it.
"""
import sys
import traceback

import bpy

ADDON_ZIP, OUT = sys.argv[sys.argv.index("--") + 1:][:2]
draws = [0]


def count_draw(self, context):
    draws[0] += 1


def view3d():
    window = bpy.context.window_manager.windows[0]
    area = max((a for a in window.screen.areas if a.type == "VIEW_3D"), key=lambda a: a.width * a.height)
    return window, area, next(r for r in area.regions if r.type == "UI")


def steps():
    """Install the add-on, select the flag, open the Loop tab (click down the sidebar's tabs until the
    panel draws), then save a screenshot of the viewport with its sidebar."""
    assert bpy.ops.preferences.addon_install(filepath=ADDON_ZIP) == {"FINISHED"}
    assert bpy.ops.preferences.addon_enable(module="cyclic_loop") == {"FINISHED"}
    bpy.types.VIEW3D_PT_cyclic_loop.append(count_draw)
    flag = bpy.data.objects["Flag"]
    for ob in bpy.context.scene.objects:
        ob.select_set(ob is flag)
    bpy.context.view_layer.objects.active = flag
    window, area, region = view3d()
    area.spaces[0].show_region_ui = True
    yield
    with bpy.context.temp_override(window=window, area=area):
        assert bpy.ops.cyclic_loop.physics_defaults() == {"FINISHED"}
    flag.cyclic_loop_settings.frame_start, flag.cyclic_loop_settings.frame_end = bpy.context.scene["loop_frames"]
    window, area, region = view3d()
    x = region.x + region.width - int(10 * bpy.context.preferences.system.ui_scale)
    for y in range(region.y + region.height - 20, region.y + region.height // 2, -15):
        before = draws[0]
        for kind, value in (("MOUSEMOVE", "NOTHING"), ("LEFTMOUSE", "PRESS"), ("LEFTMOUSE", "RELEASE")):
            window.event_simulate(type=kind, value=value, x=x, y=y)
        yield
        area.tag_redraw()
        yield
        if draws[0] > before:
            break
    assert draws[0] > 0, "the Loop tab did not open"
    window.event_simulate(type="MOUSEMOVE", value="NOTHING", x=area.x + area.width // 3, y=area.y + area.height // 2)
    for _ in range(4):
        yield
    with bpy.context.temp_override(window=window, area=area):
        bpy.ops.screen.screenshot_area(filepath=OUT)


def tick(scenario=steps()):
    try:
        next(scenario)
        return 0.2
    except StopIteration:
        print(f"wrote {OUT}", flush=True)
    except Exception:
        traceback.print_exc()
    bpy.ops.wm.quit_blender()
    return None


bpy.app.timers.register(tick, first_interval=1.0)
