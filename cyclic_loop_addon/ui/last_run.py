"""The finished run in the panel: its verdicts, figures and notes in the scene's run state, the seam
picture (a preview image the panel draws), and the scene range set to the loop."""
import json

import bpy
import bpy.utils.previews
import numpy as np

from ..outputs import preview
from . import timeline
from ..report.verdict import details, verdict

_previews = None        # bpy.utils.previews collection holding the seam picture


def seam_icon():
    """The icon id of the last run's seam picture, or 0 when there is none (e.g. after loading a file)."""
    shown = _previews.get("seam") if _previews is not None else None
    return shown.icon_id if shown is not None else 0


def show_picture(rgb):
    """Make ``rgb`` (H, W, 3) uint8 the seam picture the panel draws."""
    global _previews
    if _previews is None:
        _previews = bpy.utils.previews.new()
    shown = _previews.get("seam") or _previews.new("seam")
    h, w, _ = rgb.shape
    rgba = np.concatenate([rgb[::-1] / 255.0, np.ones((h, w, 1))], axis=-1).astype(np.float32)
    shown.image_size = (w, h)
    shown.image_pixels_float.foreach_set(rgba.ravel())


def record(context, run, gathered, q, rep, set_scene_range):
    """Show a finished run in the panel.

    Stores the verdicts, figures and notes of ``rep`` in ``run``, shows the seam picture of loop q and,
    when ``set_scene_range``, sets the scene's frame range to the loop.

    Parameters
    ----------
    context : bpy.types.Context
        The context of the scene the loop was made in.
    run : properties.CyclicLoopRun
        The scene's run state (``scene.cyclic_loop_run``).
    gathered : scene_reader.Gathered
        The gathered simulation.
    q : array_like, (N, n, 3)
        The loop's frames.
    rep : dict
        The loop's report (``solver_core.loop_report``).
    set_scene_range : bool
        Set the scene's frame range to the loop.
    """
    run.verdict = json.dumps(verdict(rep))
    run.details = "\n".join(details(rep))
    run.notes = "\n".join(rep.get("notes", []))
    run.loop_first, run.loop_last = gathered.frame_start, int(gathered.frames[-1])
    run.loop_step = gathered.frame_step
    show_picture(preview.picture(gathered, q, compact=True))
    if set_scene_range:
        timeline.set_range(context.scene, run)


def unregister():
    global _previews
    if _previews is not None:
        bpy.utils.previews.remove(_previews)
        _previews = None
