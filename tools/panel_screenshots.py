"""Copy the GUI test's screenshots (out/ci_screenshots, written by tests/test_gui_xvfb.py) into docs/panel for
the README: the sidebar cut out of each 3D-view shot, the whole window kept where the status bar matters,
256-colour PNGs.

    .venv/bin/python -m pytest -q tests/test_gui_xvfb.py && .venv/bin/python tools/panel_screenshots.py
"""
import os

from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDEBAR = ("panel_invalid", "panel_before", "panel_reading", "panel_starting", "panel_initial_guess",
           "panel_optimizing", "panel_writing", "panel_cancelled", "panel_not_converged", "panel_verdict",
           "panel_seam")
WINDOW = ("window_optimizing",)
SIDEBAR_WIDTH = 300     # pixels from the right edge of the 3D view: the sidebar and its tabs


def main():
    src, out = os.path.join(ROOT, "out", "ci_screenshots"), os.path.join(ROOT, "docs", "panel")
    os.makedirs(out, exist_ok=True)
    for name in SIDEBAR + WINDOW:
        image = Image.open(os.path.join(src, f"{name}.png")).convert("RGB")
        if name in SIDEBAR:
            image = image.crop((image.width - SIDEBAR_WIDTH, 0, image.width, image.height))
        image.quantize(256).save(os.path.join(out, f"{name}.png"), optimize=True)
        print(f"docs/panel/{name}.png {image.width}x{image.height}")


if __name__ == "__main__":
    main()
