"""The files a bake writes, named once: bake.py's options, the guard, the farm's batch files and its
finished-task check all read this table. No bpy."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Output:
    """One output option ``--name PATH``. ``extension``: what a path of it ends with ("" for a folder);
    ``kind``: its key in a farm batch file; ``product``: a result of the loop (not only its report);
    ``folder``: the path is a folder the output writes into."""
    name: str
    metavar: str
    help: str
    extension: str
    kind: str
    product: bool = True
    folder: bool = False


# Every path the bake writes, guarded as one (add a new output here and write it in bake.run).
OUTPUTS = (
    Output("output", "OUT.blend", "save the scene with the loop written back", ".blend", "blend"),
    Output("abc", "OUT.abc", "Alembic of one period", ".abc", "abc"),
    Output("pc2", "OUT.pc2", "PC2 of one period (played by a Mesh Cache modifier in --output)", ".pc2", "pc2"),
    Output("preview", "OUT.png", "strip of frames around the wrap, cache above, loop below", ".png", "preview"),
    Output("vat", "DIR", "vertex animation textures (PNG and EXR), JSON and mesh into DIR", "", "vat", folder=True),
    Output("glb", "OUT.glb", "glTF binary of one period as morph-target animation", ".glb", "glb"),
    Output("html", "OUT.html", "self-contained web page playing the loop beside the cache", ".html", "html"),
    Output("json", "OUT.json", "the report as JSON", ".json", "json", product=False),
)
PRODUCTS = tuple(out for out in OUTPUTS if out.product)
BY_NAME = {out.name: out for out in OUTPUTS}

# The panel's outputs: (name, label, description: its enum item; the bake output it writes ("" for shape
# keys), what it is called in messages).
PANEL_OUTPUTS = (
    ("SHAPE_KEYS", "Shape Keys", "Shape keys keyed to play the loop cyclically", "", "the shape keys"),
    ("ALEMBIC", "Alembic", "An .abc cache (Unreal Geometry Cache, Unity Alembic)", "abc", "the Alembic file"),
    ("PC2", "PC2", "A .pc2 point cache read by a Mesh Cache modifier", "pc2", "the PC2 file"),
    ("VAT", "Vertex Animation Texture", "A folder with position and normal textures (16-bit PNG and half EXR), "
     "their JSON and the mesh with a VAT UV map (Unreal, Unity, Godot, three.js shaders)", "vat", "the VAT folder"),
    ("GLTF", "glTF (GLB)", "A .glb with the loop as morph-target animation (three.js, Babylon.js, Godot, "
     "Unity, Unreal)", "glb", "the glTF file"),
    ("WEB", "Web Preview", "A self-contained .html page playing the loop beside the cache (three.js)", "html",
     "the web page"),
)
PANEL = {name: (BY_NAME.get(bake), what) for name, _, _, bake, what in PANEL_OUTPUTS}   # name -> (Output, what)
