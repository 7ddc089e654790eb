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
    ("auto", "From Physics", "Linearized for Blender cloth, backward Euler for thin shells and soft bodies, "
     "symplectic for N bodies"),
    ("linearized", "Linearized (Blender)", "Residual of one linearized backward-Euler step, the integrator of "
     "Blender's cloth: the loop keeps the character of a Blender cloth cache"),
    ("backward", "Backward Euler", "Residual of backward Euler (paper eq. 13)"),
    ("symplectic", "Symplectic Euler", "Residual of the symplectic scheme (paper eq. 14)"),
)
INITS = (
    ("fast_projection", "Fast Projection", "Keyframe control by fast projection (paper Algorithm 2)"),
    ("forward", "Forward Simulation", "The forward simulation itself"),
    ("crossfade", "Crossfade", "A crossfade of the solver's forward simulation"),
    ("cache", "Blender Cache", "A crossfade of Blender's cached simulation"),
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
