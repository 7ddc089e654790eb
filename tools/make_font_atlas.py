"""Build cyclic_loop_addon/report/font_atlas.py, the glyphs the seam picture writes its labels with (no font library
at run time): DejaVu Sans (Bitstream Vera license, free to embed), anti-aliased, in two pixel sizes.

    .venv/bin/python tools/make_font_atlas.py [/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf]
"""
import base64
import io
import os
import sys
import textwrap

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CHARS = "".join(chr(c) for c in range(32, 127)) + "×—–·…"
SIZES = (13, 22)


def main(argv):
    font_path = argv[1] if len(argv) > 1 else "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    arrays = {"chars": np.array(CHARS)}
    for size in SIZES:
        font = ImageFont.truetype(font_path, size)
        ascent, descent = font.getmetrics()
        height = ascent + descent
        glyphs, widths = [], []
        for ch in CHARS:
            width = max(int(round(font.getlength(ch))), 1)
            img = Image.new("L", (width, height), 0)
            ImageDraw.Draw(img).text((0, 0), ch, font=font, fill=255)
            glyphs.append(np.asarray(img))
            widths.append(width)
        arrays[f"atlas{size}"] = np.concatenate(glyphs, axis=1)
        arrays[f"widths{size}"] = np.array(widths, dtype=np.int16)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    text = "\n".join(textwrap.wrap(base64.b64encode(buffer.getvalue()).decode(), 110))
    out = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cyclic_loop_addon", "report", "font_atlas.py")
    with open(out, "w") as fh:
        fh.write('"""Glyphs of DejaVu Sans (Bitstream Vera license) for the seam picture, made by tools/make_font_atlas.py:\n'
                 'a base64 .npz with ``chars`` and, per pixel size, ``atlas<size>`` and ``widths<size>``."""\n'
                 f'SIZES = {SIZES}\nDATA = """\n{text}\n"""\n')
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main(sys.argv)
