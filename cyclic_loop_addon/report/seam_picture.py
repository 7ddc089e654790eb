"""The seam picture an artist judges a loop by: a few tracked vertices' position and speed over two
periods, the source cache played as a loop beside the loop, the wrap marked in red. Part of the add-on's
report layer; no bpy.

The lines and labels are drawn with numpy (anti-aliased lines, glyphs from font_atlas): Blender's Python
has no plotting library (Debian's Blender runs on the system Python, extension Blenders bundle numpy
only). The pixels go to Blender's image API: the panel shows them as a preview (last_run.show_picture),
bake.py's --preview writes them as a PNG (images.write_picture). docs/design/report.md says why.
"""
import base64
import functools
import io

import numpy as np

from . import font_atlas
from ..core import sc

WHITE, FRAME, TEXT, MUTED = (255, 255, 255), (200, 200, 200), (30, 30, 30), (110, 110, 110)
WRAP = (214, 39, 40)
COLORS = ((31, 119, 180), (44, 160, 44), (148, 103, 189))


@functools.lru_cache(maxsize=None)
def _font(size):
    """(glyph mask (h, w) floats 0..1 by character, line height) of the atlas's pixel ``size``."""
    with np.load(io.BytesIO(base64.b64decode(font_atlas.DATA))) as data:
        chars, atlas, widths = str(data["chars"]), data[f"atlas{size}"], data[f"widths{size}"]
    starts = np.concatenate([[0], np.cumsum(widths)])
    glyphs = {ch: atlas[:, starts[i]:starts[i + 1]] / 255.0 for i, ch in enumerate(chars)}
    return glyphs, atlas.shape[0]


class Canvas:
    """An RGB picture drawn with anti-aliased lines and text."""

    def __init__(self, width, height):
        self.rgb = np.empty((height, width, 3), dtype=float)
        self.rgb[:] = WHITE

    def _blend(self, y0, x0, alpha, color):
        h, w = self.rgb.shape[:2]
        ys, xs = slice(max(y0, 0), min(y0 + alpha.shape[0], h)), slice(max(x0, 0), min(x0 + alpha.shape[1], w))
        a = alpha[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0, None]
        self.rgb[ys, xs] = self.rgb[ys, xs] * (1 - a) + np.asarray(color, dtype=float) * a

    def text_width(self, text, size):
        glyphs, _ = _font(size)
        return sum(glyphs.get(ch, glyphs["?"]).shape[1] for ch in text)

    def text(self, x, y, text, size, color=TEXT, align="left"):
        """Draw ``text`` with its top at y; ``align`` left, center or right of x."""
        glyphs, _ = _font(size)
        x -= {"left": 0, "center": self.text_width(text, size) // 2, "right": self.text_width(text, size)}[align]
        for ch in text:
            mask = glyphs.get(ch, glyphs["?"])
            self._blend(int(y), int(x), mask, color)
            x += mask.shape[1]

    def rect(self, x0, y0, x1, y1, color, width=1):
        for xa, ya, xb, yb in ((x0, y0, x1, y0), (x1, y0, x1, y1), (x1, y1, x0, y1), (x0, y1, x0, y0)):
            self.polyline([xa, xb], [ya, yb], color, width)

    def polyline(self, xs, ys, color, width=1.5):
        """An anti-aliased line through the points (xs, ys), ``width`` pixels wide."""
        p = np.column_stack([xs, ys]).astype(float)
        seg = np.diff(p, axis=0)
        steps = np.maximum(np.ceil(np.linalg.norm(seg, axis=1) / 0.35).astype(int), 1)
        t = np.concatenate([np.arange(k) / k for k in steps])
        start = np.repeat(np.arange(len(seg)), steps)
        pts = np.vstack([p[start] + seg[start] * t[:, None], p[-1:]])
        r = width / 2.0
        reach = int(np.ceil(r)) + 1
        off = np.stack(np.meshgrid(np.arange(-reach, reach + 1), np.arange(-reach, reach + 1)), -1).reshape(-1, 2)
        pix = np.floor(pts)[:, None, :].astype(int) + off[None]
        dist = np.linalg.norm(pix + 0.5 - pts[:, None, :], axis=-1)
        cover = np.clip(r + 0.5 - dist, 0.0, 1.0).ravel()
        pix = pix.reshape(-1, 2)
        h, w = self.rgb.shape[:2]
        ok = (pix[:, 0] >= 0) & (pix[:, 0] < w) & (pix[:, 1] >= 0) & (pix[:, 1] < h) & (cover > 0)
        alpha = np.zeros((h, w))
        np.maximum.at(alpha, (pix[ok, 1], pix[ok, 0]), cover[ok])
        self._blend(0, 0, alpha, color)

    def image(self):
        return np.clip(np.round(self.rgb), 0, 255).astype(np.uint8)


def seam_picture(cache, loop, dt, vertices=None, scale=1, compact=False):
    """The seam picture of a loop beside its cache.

    Columns "cache played as a loop" and "the loop"; rows the tracked vertices' position along the axis
    they move most and their speed, two periods each with the wrap in red.

    Parameters
    ----------
    cache, loop : array_like, (N, n, 3)
        The source cache's and the loop's frames, ``dt`` seconds apart.
    dt : float
        Seconds between frames.
    vertices : array_like of int, optional
        The vertices to track (default: ``solver_core.metrics.tracked_vertices`` of the cache).
    scale : int
        1: 360 px wide; 2: 720 px, for a page.
    compact : bool
        250 px wide (times ``scale``) with shorter words, for Blender's sidebar.

    Returns
    -------
    numpy.ndarray, (H, W, 3) uint8
        The picture, row 0 at the top.
    """
    cache, loop = np.asarray(cache, dtype=float), np.asarray(loop, dtype=float)
    vertices = sc.metrics.tracked_vertices(cache) if vertices is None else np.asarray(vertices)
    axis = int(np.argmax(cache[:, vertices].std(axis=0).sum(axis=0)))
    size = font_atlas.SIZES[0] if scale == 1 else font_atlas.SIZES[-1]
    _, line = _font(size)
    u = scale
    width, gap, margin = (250 if compact else 360) * u, 10 * u, 6 * u
    plot_w = (width - 2 * margin - gap) // 2
    plot_h = (80 if compact else 96) * u
    columns = (("cache as a loop" if compact else "cache played as a loop", cache), ("the loop", loop))
    tracks = []
    for _, q in columns:
        twice = np.concatenate([q, q, q[:1]])[:, vertices]
        speed = np.linalg.norm(np.diff(twice, axis=0), axis=-1) / dt
        tracks.append((twice[:, :, axis], speed))
    pos_lo = min(t[0].min() for t in tracks)
    pos_hi = max(t[0].max() for t in tracks)
    pos_pad = 0.08 * max(pos_hi - pos_lo, 1e-9)
    speed_top = 1.25 * max(tracks[1][1].max(), np.percentile(tracks[0][1], 90), 1e-9)
    height = margin + 2 * line + 4 * u + 2 * (line + 4 * u + plot_h + gap) + line + margin
    canvas = Canvas(width, height)
    y = margin
    for c, (label, q) in enumerate(columns):
        x_mid = margin + c * (plot_w + gap) + plot_w // 2
        canvas.text(x_mid, y, label, size, align="center")
        ratio = max(sc.metrics.jump_ratios(q, dt))   # the verdict judges the wrap by the same ratios
        canvas.text(x_mid, y + line, f"wrap {ratio:.1f}×" if compact else f"wrap jump {ratio:.1f}× a frame", size,
                    color=WRAP if ratio > 1.5 else MUTED, align="center")
    y += 2 * line + 4 * u
    name = "height" if axis == 2 else f"{'xyz'[axis]} position"
    vertices_text = "" if compact else f" of {len(vertices)} vertices"
    rows = ((f"{name}{vertices_text} (range {pos_hi - pos_lo:.2g} m)", 0, pos_lo - pos_pad,
             pos_hi + pos_pad), (f"speed (top {speed_top:.2g} m/s)", 1, 0.0, speed_top))
    n = len(cache)
    for title, r, lo, hi in rows:
        canvas.text(margin, y, title, size, color=MUTED)
        y += line + 4 * u
        for c in range(2):
            x0 = margin + c * (plot_w + gap)
            canvas.rect(x0, y, x0 + plot_w, y + plot_h, FRAME, width=1)
            xw = x0 + plot_w / 2
            canvas.polyline([xw, xw], [y + 1, y + plot_h - 1], WRAP, width=1.5 * u)
            values = tracks[c][r]
            t = np.arange(values.shape[0]) + (0.5 if r == 1 else 0.0)
            xs = x0 + 2 * u + t / (2 * n) * (plot_w - 4 * u)
            for k in range(values.shape[1]):
                v = np.clip((values[:, k] - lo) / (hi - lo), 0.0, 1.0)
                canvas.polyline(xs, y + plot_h - 2 * u - v * (plot_h - 4 * u), COLORS[k % len(COLORS)], 1.6 * u)
        y += plot_h + gap
    canvas.text(width // 2, y - gap // 2, "two periods; red: the wrap", size, color=MUTED, align="center")
    return canvas.image()

