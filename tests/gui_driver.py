"""Drives a real Blender window (run by test_gui_xvfb.py under Xvfb):

    blender --enable-event-simulate SAMPLE.blend --python tests/gui_driver.py -- ADDON_ZIP SHOT_DIR RESULT_JSON

Installs the legacy add-on zip, opens the Loop tab (clicks on the sidebar's tabs) with the flag's
post selected (Make Loop disabled, the reason inline), selects the flag (its settings read from its
physics at once, a stale message cleared), clicks Make Loop, presses Esc once the progress bar moves
(cancel), clicks Make Loop again and lets a short run finish while orbiting the view (a screenshot in
each phase; a run that stops at its iteration cap), then a run that converges; saving screenshots and
timing the waits between timer ticks and between viewport redraws (main-thread stalls) and noting
the Python threads that run meanwhile.
Every step runs from a timer, so the window keeps handling events between steps; the observations go
to RESULT_JSON for the test to judge, then Blender quits.
"""
import json
import os
import sys
import threading
import time
import traceback

import bpy

ADDON_ZIP, SHOT_DIR, RESULT_JSON = sys.argv[sys.argv.index("--") + 1:][:3]
TICK = 0.05
POLL = 0.002            # after a click, wait this little: the operator reads the scene at its first 0.1 s timer tick,
                        # and the reading phase must be seen (a TICK could fall after that timer)
ORBIT_TICKS = 10        # during the solve, orbit the view every this many ticks (an artist at work)
MAX_ITERS = 6
N_FRAMES = 12           # a short loop: a quick solve
PHASE_SHOTS = {"gather": "panel_reading", "": "panel_starting", "fast_projection": "panel_initial_guess",
               "gauss_newton": "panel_optimizing", "write": "panel_writing"}
TIMEOUT = 240.0
CLICK_WAIT = 20.0       # the longest wait for the panel to redraw, and then for a click on Make Loop to start the run

result = dict(samples=[], errors=[], screenshots={})
state = dict(panel_draws=0, viewport_draws=0, started=time.monotonic(), draw_times=[])


def count_panel_draw(self, context):
    state["panel_draws"] += 1


def count_viewport_draw():
    state["viewport_draws"] += 1
    state["draw_times"].append(time.monotonic())


def view3d():
    """(window, area, sidebar region) of the largest 3D viewport."""
    window = bpy.context.window_manager.windows[0]
    area = max((a for a in window.screen.areas if a.type == "VIEW_3D"), key=lambda a: a.width * a.height)
    region = next(r for r in area.regions if r.type == "UI")
    return window, area, region


def simulate_click(window, x, y):
    window.event_simulate(type="MOUSEMOVE", value="NOTHING", x=x, y=y)
    window.event_simulate(type="LEFTMOUSE", value="PRESS", x=x, y=y)
    window.event_simulate(type="LEFTMOUSE", value="RELEASE", x=x, y=y)


def make_loop_button():
    """Window coordinates of the Make Loop button: the tall first row of the panel, under its header."""
    _, _, region = view3d()
    scale = bpy.context.preferences.system.ui_scale
    return region.x + region.width // 2 - int(10 * scale), region.y + region.height - int(58 * scale)


def orbit_view(step):
    """Turn the 3D view a little (view3d.view_orbit), as an artist looking around during the solve:
    right on even steps, back left on odd ones."""
    window, area, _ = view3d()
    region = next(r for r in area.regions if r.type == "WINDOW")
    with bpy.context.temp_override(window=window, area=area, region=region):
        return bpy.ops.view3d.view_orbit(angle=0.1, type="ORBITLEFT" if step % 2 else "ORBITRIGHT")


def screenshot(name, whole_window=False):
    """Save the 3D viewport with its sidebar (or the whole window, status bar included) as NAME.png."""
    window, area, _ = view3d()
    path = os.path.join(SHOT_DIR, f"{name}.png")
    with bpy.context.temp_override(window=window, area=area):
        if whole_window:
            bpy.ops.screen.screenshot(filepath=path)
        else:
            bpy.ops.screen.screenshot_area(filepath=path)
    result["screenshots"][name] = path


def select(obj):
    for ob in bpy.context.scene.objects:
        ob.select_set(ob is obj)
    bpy.context.view_layer.objects.active = obj


def text_fits(texts):
    """The widest of ``texts`` in the UI font (blf) and the sidebar's width for a label with an icon."""
    import blf
    _, _, region = view3d()
    prefs = bpy.context.preferences
    scale = prefs.system.ui_scale
    points = prefs.ui_styles[0].widget.points * scale
    try:
        blf.size(0, points)
    except TypeError:               # Blender 3.x: size(fontid, size, dpi)
        blf.size(0, points, 72)
    widest = max(blf.dimensions(0, t)[0] for t in texts)
    # panel margins, the box, the icon column
    return dict(widest=widest, room=region.width - int((2 * 10 + 20 + 12) * scale))


def panel_rows(verdict):
    """The texts of the verdict's rows as the panel draws them at the sidebar's width."""
    panel = sys.modules["cyclic_loop.cyclic_loop_addon.ui.panel"]
    _, _, region = view3d()
    return [text for text, _ in panel.verdict_rows(verdict, panel._chars(bpy.context, region))]


def click_make_loop(run, redraw_first=False):
    """Click Make Loop; wait in POLL steps until the run has started. ``redraw_first``: move the pointer
    off the button and let the panel redraw before the click, as an artist clicks what is shown: a button
    under a resting pointer keeps the state it was drawn with (after Restore Simulation, Make Loop stayed
    greyed as while the object looped in CI's screenshot, and the click there did not start the run)."""
    window, area, _ = view3d()
    if redraw_first:
        window.event_simulate(type="MOUSEMOVE", value="NOTHING", x=area.x + area.width // 3,
                              y=area.y + area.height // 2)
        drawn, deadline = state["panel_draws"], time.monotonic() + CLICK_WAIT
        area.tag_redraw()
        while state["panel_draws"] == drawn and time.monotonic() < deadline:
            yield POLL
    simulate_click(window, *make_loop_button())
    deadline = time.monotonic() + CLICK_WAIT
    while not run.running and time.monotonic() < deadline:
        yield POLL


def loop_keys(obj):
    keys = obj.data.shape_keys
    return [] if keys is None else [kb.name for kb in keys.key_blocks if kb.name.startswith("CyclicLoop.")]


def snapshot(obj):
    return dict(keys=loop_keys(obj), marker=obj.get("cyclic_loop") is not None,
                modifiers=[m.show_viewport for m in obj.modifiers],
                coords=[tuple(round(c, 6) for c in v.co) for v in obj.data.vertices])


def solving_in():
    """Where the running Make Loop solves ("process" or "thread"), None before it has started."""
    job = sys.modules["cyclic_loop.cyclic_loop_addon.ui.operators"]._job
    return None if job is None else getattr(job, "where", "thread")


def sample(run, label):
    result["samples"].append(dict(label=label, t=round(time.monotonic() - state["started"], 3),
                                  running=run.running, phase=run.phase, iteration=run.iteration,
                                  progress=run.progress, loss=run.loss, timer_redraws=run.redraws,
                                  status_text=run.status_text, time_text=run.time_text,
                                  panel_draws=state["panel_draws"], viewport_draws=state["viewport_draws"]))


def longest_gap(times):
    """The longest time (s) between consecutive entries of ``times`` (None: a break, not counted)."""
    return max((b - a for a, b in zip(times, times[1:]) if a is not None and b is not None), default=float("inf"))


def steps():
    """The scenario as a generator: each ``yield`` gives the window TICK seconds of event handling (``yield w``:
    w seconds)."""
    assert bpy.ops.preferences.addon_install(filepath=ADDON_ZIP) == {"FINISHED"}
    assert bpy.ops.preferences.addon_enable(module="cyclic_loop") == {"FINISHED"}
    bpy.types.VIEW3D_PT_cyclic_loop.append(count_panel_draw)
    handle = bpy.types.SpaceView3D.draw_handler_add(count_viewport_draw, (), "WINDOW", "POST_PIXEL")
    scene = bpy.context.scene
    obj = next(ob for ob in scene.objects if any(m.type == "CLOTH" for m in ob.modifiers))
    post = scene.objects["Post"]
    run = scene.cyclic_loop_run
    select(post)                    # a mesh without physics: Make Loop is disabled, the reason is shown
    window, area, region = view3d()
    area.spaces[0].show_region_ui = True
    bpy.context.preferences.view.smooth_view = 0    # an orbit is one redraw, not an animation
    yield
    # Open the Loop tab: click down the sidebar's tab strip (Item, Tool, View, ...) until our panel draws.
    window, area, region = view3d()
    x = region.x + region.width - int(10 * bpy.context.preferences.system.ui_scale)
    for y in range(region.y + region.height - 20, region.y + region.height // 2, -15):
        before = state["panel_draws"]
        simulate_click(window, x, y)
        yield
        area.tag_redraw()
        yield
        if state["panel_draws"] > before:
            break
    result["loop_tab_open"] = state["panel_draws"] > 0
    result["sidebar_width"] = region.width
    result["invalid_can_make_loop"] = bpy.ops.cyclic_loop.make_loop.poll()
    selection = sys.modules["cyclic_loop.cyclic_loop_addon.ui.selection"]
    result["invalid_reason"] = selection.problem(bpy.context)
    run.message = "Not started: an old message"
    screenshot("panel_invalid")
    select(obj)                     # its settings come from its physics at once; the old message goes
    for _ in range(3):
        yield
    settings = obj.cyclic_loop_settings
    result["on_select"] = dict(initialized=settings.initialized, frames=[settings.frame_start, settings.frame_end],
                               model=settings.model, substeps=settings.substeps, init=settings.init,
                               hard_initial=settings.hard_initial, soft_weight=settings.soft_weight,
                               message=run.message,
                               can_make_loop=bpy.ops.cyclic_loop.make_loop.poll())
    mod = next(m for m in obj.modifiers if m.type == "CLOTH")
    result["cache"] = dict(frames=[mod.point_cache.frame_start, mod.point_cache.frame_end],
                           quality=mod.settings.quality, loop_frames=list(scene["loop_frames"]))
    screenshot("panel_before")
    settings.frame_start = scene["loop_frames"][0]
    settings.frame_end = settings.frame_start + N_FRAMES - 1
    # hard first frames: on these 12 frames the cloth's default soft ones (eps 1000) crawl past 50 iterations
    settings.substeps, settings.max_iters, settings.hard_initial = 1, MAX_ITERS, True
    original = snapshot(obj)
    result["range_before"] = [scene.frame_start, scene.frame_end]

    # Run 1: click Make Loop, press Esc once the progress bar has moved.
    yield from click_make_loop(run)
    result["run1_started"] = run.running
    deadline = time.monotonic() + TIMEOUT
    while run.running and run.phase in ("gather", "") and time.monotonic() < deadline:
        result["run1_solving_in"] = solving_in() or result.get("run1_solving_in")
        sample(run, "run1")
        yield
    sample(run, "run1")
    result["run1_progress_at_esc"] = run.progress
    x, y = area.x + area.width // 3, area.y + area.height // 2
    window.event_simulate(type="MOUSEMOVE", value="NOTHING", x=x, y=y)
    window.event_simulate(type="ESC", value="PRESS", x=x, y=y)
    window.event_simulate(type="ESC", value="RELEASE", x=x, y=y)
    while run.running and time.monotonic() < deadline:
        yield
    result["run1_message"] = run.message
    result["run1_scene_unchanged"] = snapshot(obj) == original
    yield
    screenshot("panel_cancelled")

    # Run 2 (from fast projection, stopped at its iteration cap): click Make Loop, watch it to the end, a
    # screenshot in each phase (optimizing: once the time left is known, with the status bar); a second
    # Make Loop meanwhile is refused.
    settings.init = "fast_projection"
    yield from click_make_loop(run)
    result["run2_started"] = run.running
    deadline = time.monotonic() + TIMEOUT
    ticks, draws_from, threads = [], len(state["draw_times"]), set()
    pending = None          # (screenshot name, panel draws when its phase was seen)
    while run.running and time.monotonic() < deadline:
        ticks.append(time.monotonic())
        threads.update(t.name for t in threading.enumerate())
        result["run2_solving_in"] = solving_in() or result.get("run2_solving_in")
        sample(run, "run2")
        if len(ticks) % ORBIT_TICKS == 0:
            orbits = result.setdefault("orbits", [])
            orbits.extend(orbit_view(len(orbits)))
        if "second_make_loop" not in result and run.progress > 0.0:
            with bpy.context.temp_override(window=window, area=area, region=region):
                result["second_make_loop"] = sorted(bpy.ops.cyclic_loop.make_loop("INVOKE_DEFAULT"))
        shot = PHASE_SHOTS.get(run.phase)
        if pending and state["panel_draws"] > pending[1]:   # the phase has been drawn since: shoot it
            screenshot(pending[0])
            if pending[0] == "panel_optimizing":
                screenshot("window_optimizing", whole_window=True)
            pending = None
            ticks.append(None)      # the screenshot's own wait is not a stall of the window
        elif run.running and not pending and shot and shot not in result["screenshots"] and (
                run.phase != "gauss_newton" or run.time_text.endswith(" left")):
            # The screenshot shows what was last drawn. While the solve runs: ask for a redraw and shoot
            # after it (Blender's wm.redraw_timer draws at once; Blender 3.4 crashed once in five runs while it
            # did so beside the Python thread that once waited for the solve). Reading the scene (before the
            # solve starts) and writing (one tick of the operator, after it ended) are too short to wait for:
            # drawn at once.
            if run.phase in ("gather", "write"):
                with bpy.context.temp_override(window=window, area=area):
                    bpy.ops.wm.redraw_timer(type="DRAW_WIN_SWAP", iterations=1)
                screenshot(shot)
                ticks.append(None)
            else:
                pending = (shot, state["panel_draws"])
                for each in window.screen.areas:
                    each.tag_redraw()
        yield
    if pending:                 # the run ended before its last phase was drawn: shoot what is shown
        screenshot(pending[0])
    sample(run, "run2")
    result["run2_python_threads"] = sorted(threads)
    # Main-thread stalls during the solve: the longest wait between this scenario's timer ticks
    # (TICK apart when the window is idle) and between viewport redraws (orbits, ORBIT_TICKS apart).
    times = [t for t in ticks if t is not None]
    result["run2_seconds"] = times[-1] - times[0] if times else 0.0
    result["run2_longest_tick_gap"] = longest_gap(ticks)
    result["run2_longest_draw_gap"] = longest_gap([t for t in state["draw_times"][draws_from:] if t <= times[-1]])
    yield
    screenshot("panel_not_converged")
    result["run2_message"] = run.message
    result["run2_verdict"] = json.loads(run.verdict)
    result["run2_range"] = [scene.frame_start, scene.frame_end]
    result["run2_loop"] = [run.loop_first, run.loop_last]
    result["run2_verdict_fit"] = text_fits(panel_rows(result["run2_verdict"]))
    with bpy.context.temp_override(window=window, area=area, region=region):
        bpy.ops.cyclic_loop.jump(end="LAST")
        result["jump_last"] = scene.frame_current
        bpy.ops.cyclic_loop.jump(end="FIRST")
        result["jump_first"] = scene.frame_current
    result["report"] = dict(has_report=run.has_report, method=run.method, init_used=run.init_used,
                            seam_before=run.seam_before, seam_after=run.seam_after, residual=run.residual,
                            seconds=run.seconds, iterations=run.iterations)
    result["loop_keys_after"] = len(loop_keys(obj))
    result["n_loop_frames"] = settings.frame_end - settings.frame_start + 1

    # Run 3: Restore Simulation, then from Blender's cache, up to 50 iterations: it converges.
    result["looped_reason"] = selection.problem(bpy.context)
    with bpy.context.temp_override(window=window, area=area, region=region):
        assert bpy.ops.cyclic_loop.restore() == {"FINISHED"}
    result["range_after_restore"] = [scene.frame_start, scene.frame_end]
    settings.init, settings.max_iters = "cache", 50
    yield from click_make_loop(run, redraw_first=True)
    result["run3_started"] = run.running
    deadline = time.monotonic() + TIMEOUT
    while run.running and time.monotonic() < deadline:
        yield
    for _ in range(4):
        yield
    result["run3_message"] = run.message
    result["run3_verdict"] = json.loads(run.verdict)
    result["run3_verdict_fit"] = text_fits(panel_rows(result["run3_verdict"]))
    result["run3_seam_icon"] = sys.modules["cyclic_loop.cyclic_loop_addon.ui.last_run"].seam_icon()
    screenshot("panel_verdict")
    run.show_details = True
    for _ in range(4):              # drawn open, so the sidebar can scroll down to them
        yield
    with bpy.context.temp_override(window=window, area=area, region=region):
        for _ in range(30):         # down to the seam picture and the details
            bpy.ops.view2d.scroll_down(deltax=0, deltay=40)
    for _ in range(4):
        yield
    screenshot("panel_seam")
    bpy.types.SpaceView3D.draw_handler_remove(handle, "WINDOW")


def drive(scenario=steps()):
    """Timer callback: advance the scenario one step; write the result and quit at the end or on error."""
    try:
        wait = next(scenario)
        if time.monotonic() - state["started"] < 2 * TIMEOUT:
            return TICK if wait is None else wait
        result["errors"].append("scenario timed out")
    except StopIteration:
        pass
    except Exception:
        result["errors"].append(traceback.format_exc())
    with open(RESULT_JSON, "w") as fh:
        json.dump(result, fh, indent=1)
    bpy.ops.wm.quit_blender()
    return None


bpy.app.timers.register(drive, first_interval=1.0)
