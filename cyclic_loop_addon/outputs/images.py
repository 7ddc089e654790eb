"""Images written and read with Blender's image API: data images (no colour management) as 16-bit PNG or
half-float EXR, and pictures (the seam picture) as 8-bit RGB PNG.

Data arrays are (height, width, 4) float32 RGBA, pictures (height, width, 3) uint8 RGB, row 0 at the top of
the picture, as in the file.
"""
import os

import bpy
import numpy as np

from ..errors import LoopInputError
from .files import atomic_path, writer_failure

FORMATS = {".png": ("PNG", "16"), ".exr": ("OPEN_EXR", "16")}   # 16: 16-bit PNG, half-float EXR


def _image_from_array(name, rgba):
    height, width = rgba.shape[:2]
    image = bpy.data.images.new(name, width, height, alpha=True, float_buffer=True)
    image.colorspace_settings.name = "Non-Color"
    image.pixels.foreach_set(np.ascontiguousarray(rgba[::-1], dtype=np.float32).ravel())
    return image


def write_image(path, rgba, what="image"):
    """Write ``rgba`` (H, W, 4) to ``path`` (.png: 16-bit, .exr: half float, ZIP) atomically, unchanged by
    any view transform; the open scene's render settings are not touched."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise LoopInputError(f"cannot write the {what} {path}: give a .png or .exr file name")
    file_format, depth = FORMATS[ext]
    image = _image_from_array(os.path.basename(path), rgba)
    scene = bpy.data.scenes.new("CyclicLoop image writer")
    try:
        scene.view_settings.view_transform = "Standard"
        scene.view_settings.look = "None"
        settings = scene.render.image_settings
        settings.file_format, settings.color_mode, settings.color_depth = file_format, "RGBA", depth
        if file_format == "OPEN_EXR":
            settings.exr_codec = "ZIP"
        with atomic_path(path, what) as tmp:
            image.save_render(tmp, scene=scene)
            if not os.path.exists(tmp):
                raise LoopInputError(f"Blender wrote no {what} at {path}")
    finally:
        bpy.data.scenes.remove(scene)
        bpy.data.images.remove(image)
    return path


PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"     # a PNG file's last chunk: IEND, empty, and its CRC


def _complete_png(path):
    """Raise ValueError unless the file at ``path`` ends with a PNG's last chunk: a full disk truncates
    Blender's save of a picture without an error."""
    with open(path, "rb") as fh:
        fh.seek(max(os.path.getsize(path) - len(PNG_END), 0))
        if fh.read() != PNG_END:
            raise ValueError("the PNG file ends early")


def write_picture(path, rgb, what="picture"):
    """Write a picture as an 8-bit RGB PNG, atomically, its bytes unchanged.

    Parameters
    ----------
    path : str
        The .png file to write.
    rgb : numpy.ndarray, (H, W, 3) uint8
        The picture, row 0 at the top.
    what : str
        What the file is, for error messages.

    Returns
    -------
    str
        ``path``.
    """
    height, width = rgb.shape[:2]
    image = bpy.data.images.new(os.path.basename(path), width, height, alpha=False)   # 8-bit RGB buffer
    try:
        rgba = np.concatenate([rgb[::-1] / 255.0, np.ones((height, width, 1))], axis=-1)
        image.pixels.foreach_set(rgba.astype(np.float32).ravel())     # byte = round(255 x), the same bytes
        image.file_format = "PNG"
        with atomic_path(path, what, verify=_complete_png) as tmp:
            image.filepath_raw = tmp
            try:
                image.save()            # the byte buffer as it is: no view transform on a byte image's save
            except RuntimeError as exc:     # Blender reports a failed save (a full disk) this way
                raise writer_failure(path, what, exc) from exc
            if not os.path.exists(tmp):
                raise LoopInputError(f"Blender wrote no {what} at {path}")
    finally:
        bpy.data.images.remove(image)
    return path


def read_image(path):
    """(H, W, 4) float32 RGBA of an image file, row 0 at the top, values as stored (no colour transform)."""
    image = bpy.data.images.load(os.path.abspath(path), check_existing=False)
    try:
        image.colorspace_settings.name = "Non-Color"
        width, height = image.size
        pixels = np.empty(width * height * 4, dtype=np.float32)
        image.pixels.foreach_get(pixels)
    finally:
        bpy.data.images.remove(image)
    return pixels.reshape(height, width, 4)[::-1].copy()
