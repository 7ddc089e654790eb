"""The add-on's words, defined once: models, methods and their labels, the labels of the solver's schemes
and initial guesses (whose names solver_core defines), the default iteration cap and each model's solver
defaults. bake.py's argparse choices and defaults, the panel's EnumProperty items, its selection's
settings and presets, and scene_reader's validation are all derived from these tables. No bpy."""
from .core import sc

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
# The solver's schemes and initial guesses are named once, in solver_core (scheme.SCHEMES,
# clip_loop.CLIP_INITS); here only their words, keyed by name, in the panel's order (an EnumProperty stores
# an item's position, so the order is part of saved files). A name without words fails at import.
SCHEME_WORDS = {
    "auto": ("From Physics", "The physics the object already has decides (recommended)"),
    "linearized": ("Linearized (Blender)", "Judge the loop by the same steps as Blender's cloth: it keeps the "
                   "look of the cloth cache"),
    "backward": ("Backward Euler", "A stable, slightly damped judge of the motion (thin shells, soft bodies)"),
    "symplectic": ("Symplectic Euler", "An undamped judge of the motion (planets, N bodies)"),
}
INIT_WORDS = {
    "fast_projection": ("Fast Projection", "Start from a quick physical loop (the paper's method; N bodies "
                        "start from the loop's two halves simulated from the wrap, forward and backward in time)"),
    "forward": ("Forward Simulation", "Start from the solver's own simulation"),
    "crossfade": ("Crossfade", "Start from a blend of the solver's own simulation"),
    "cache": ("Blender Cache", "Start from a blend of Blender's cached simulation"),
    "cache_or_forward": ("Cache or Simulation", "Start from Blender's cache and from the solver's own "
                         "simulation, and keep the better loop (safest for cloth; the start that falls behind "
                         "is dropped after a few iterations)"),
}


def _items(names_in_order, words):
    """(name, label, description) enum items of ``names_in_order``, their words from ``words``."""
    return tuple((name, *words[name]) for name in names_in_order)


# (name, label, description): the panel's enum items; the names are the settings' values
SCHEMES = _items(("auto", *sorted(sc.SCHEMES, key=list(SCHEME_WORDS).index)), SCHEME_WORDS)
INITS = _items(sc.CLIP_INITS, INIT_WORDS)
METHODS = (
    ("physical", "Physical Loop", "Minimize the residual force around the loop (the paper's method)"),
    ("crossfade", "Crossfade (baseline)", "Plain crossfade of the simulation, for comparison"),
)
# The residual scheme of each model when the settings say "auto": Blender's cloth integrator takes one
# linearized backward-Euler step per sub-step; stiff shells and soft bodies need an implicit scheme.
SCHEME_OF_MODEL = {"blender_cloth": "linearized", "shell": "backward", "soft_body": "backward",
                   "nbody": "symplectic"}

# Soft initial conditions' eps (eq. 15: penalty |q - r|^2_M / (2 h^3 eps), larger is freer; 0 is hard): the
# panel's Softness and bake.py's --soft. At 1000 the penalty is 1/6000 of the loss's inertia diagonal, so a
# cloth loop may leave the cache's first two frames for a motion that closes (docs/design/defaults.md:
# softness).
SOFTNESS = 1000.0
# The solver defaults of each model, read by the panel's selection (scene_reader.physics_defaults), its
# presets and bake.py, so they cannot drift: the initial guess, the solver steps per frame (0: the
# physics' own, a cloth's quality) and ``soft`` (0: hard initial conditions, else eps). Blender cloth
# solves on the frame grid with soft first frames, from its cache and from the solver's own simulation
# ("cache_or_forward", solver_core.clip_loop): a cloth driven by forcing that repeats loops better from the
# simulation, a steady one from the cache. The other models keep the paper's start, their own steps and
# hard frames (docs/design/defaults.md: model defaults).
MODEL_DEFAULTS = {
    "blender_cloth": dict(init="cache_or_forward", substeps=1, soft=SOFTNESS),
    "shell": dict(init="fast_projection", substeps=0, soft=0.0),
    "soft_body": dict(init="fast_projection", substeps=0, soft=0.0),
    "nbody": dict(init="fast_projection", substeps=0, soft=0.0),
}
# The first part of a physics cache is its settle from rest (a flag starts flat and still): not part of a
# motion that can loop. The default loop range skips this fraction of the cache.
SETTLE_FRACTION = 1 / 3


def loop_range(first, last):
    """The default loop frames of a cache of frames first..last: its end, without the settle from rest."""
    return first + int((last - first + 1) * SETTLE_FRACTION), last


def names(items):
    """The names of enum items."""
    return tuple(item[0] for item in items)


assert set(SCHEME_OF_MODEL) == set(MODEL_DEFAULTS) == set(names(MODELS)) - {"auto"}
assert all(d["init"] in sc.CLIP_INITS and d["soft"] >= 0 for d in MODEL_DEFAULTS.values())
