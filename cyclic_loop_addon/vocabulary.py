"""The add-on's words, defined once: models, schemes, initial guesses, methods and their labels, and the
default iteration cap. bake.py's argparse choices, the panel's EnumProperty items and scene_io's
validation are all derived from these tables. No bpy."""
from .solver import sc

ITERATIONS = 50     # the add-on's default Gauss–Newton iteration cap (panel, bake.py, scripts)

# (name, label, description): the panel's enum items; the names are the settings' values
MODELS = (
    ("auto", "From Physics", "The model of the object's physics: Blender cloth springs, soft body, "
     "or N bodies when several objects are selected"),
    ("blender_cloth", "Cloth (Blender springs)", "Blender's cloth spring model with its settings"),
    ("shell", "Cloth (thin shell)", "FEM membrane and discrete-shell bending (cotton)"),
    ("soft_body", "Soft Body", "Tetrahedral FEM from the Soft Body settings"),
    ("nbody", "N Bodies", "The selected objects are bodies under mutual gravity"),
)
SCHEMES = (
    ("auto", "From Physics", "The physics the object already has decides (recommended)"),
    ("linearized", "Linearized (Blender)", "Judge the loop by the same steps as Blender's cloth: it keeps the "
     "look of the cloth cache"),
    ("backward", "Backward Euler", "A stable, slightly damped judge of the motion (thin shells, soft bodies)"),
    ("symplectic", "Symplectic Euler", "An undamped judge of the motion (planets, N bodies)"),
)
INITS = (
    ("fast_projection", "Fast Projection", "Start from a quick physical loop (the paper's method)"),
    ("forward", "Forward Simulation", "Start from the solver's own simulation"),
    ("crossfade", "Crossfade", "Start from a blend of the solver's own simulation"),
    ("cache", "Blender Cache", "Start from a blend of Blender's cached simulation (safest for cloth)"),
)
METHODS = (
    ("physical", "Physical Loop", "Minimize the residual force around the loop (the paper's method)"),
    ("crossfade", "Crossfade (baseline)", "Plain crossfade of the simulation, for comparison"),
)
# The residual scheme of each model when the settings say "auto": Blender's cloth integrator takes one
# linearized backward-Euler step per sub-step; stiff shells and soft bodies need an implicit scheme.
SCHEME_OF_MODEL = {"blender_cloth": "linearized", "shell": "backward", "soft_body": "backward",
                   "nbody": "symplectic"}


def names(items):
    """The names of enum items."""
    return tuple(item[0] for item in items)


assert set(names(SCHEMES)) == {"auto", *sc.SCHEMES} and names(INITS) == sc.CLIP_INITS
assert set(SCHEME_OF_MODEL) == set(names(MODELS)) - {"auto"}
