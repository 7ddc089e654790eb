"""The add-on's words, defined once: models, schemes, initial guesses, methods and their labels, the
default iteration cap and each model's solver defaults. bake.py's argparse choices and defaults, the
panel's EnumProperty items, its selection's settings and presets, and scene_io's validation are all
derived from these tables. No bpy."""
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
    ("fast_projection", "Fast Projection", "Start from a quick physical loop (the paper's method; N bodies "
     "start from the loop's two halves simulated from the wrap, forward and backward in time)"),
    ("forward", "Forward Simulation", "Start from the solver's own simulation"),
    ("crossfade", "Crossfade", "Start from a blend of the solver's own simulation"),
    ("cache", "Blender Cache", "Start from a blend of Blender's cached simulation"),
    ("cache_or_forward", "Cache or Simulation", "Start from Blender's cache and from the solver's own "
     "simulation, and keep the better loop (safest for cloth; the start that falls behind is dropped "
     "after a few iterations)"),
)
METHODS = (
    ("physical", "Physical Loop", "Minimize the residual force around the loop (the paper's method)"),
    ("crossfade", "Crossfade (baseline)", "Plain crossfade of the simulation, for comparison"),
)
# The residual scheme of each model when the settings say "auto": Blender's cloth integrator takes one
# linearized backward-Euler step per sub-step; stiff shells and soft bodies need an implicit scheme.
SCHEME_OF_MODEL = {"blender_cloth": "linearized", "shell": "backward", "soft_body": "backward",
                   "nbody": "symplectic"}

# Soft initial conditions' eps (eq. 15: penalty |q - r|^2_M / (2 h^3 eps), larger is freer; 0 is hard): the
# panel's Softness and bake.py's --soft. At 1000 the penalty is 1/6000 of the loss's inertia diagonal, so
# a cloth loop may leave the cache's first two frames for a motion that closes: the README's main job (the
# flag, frames 49-72 on the frame grid, from the cache) converges seamless (wrap velocity 1.19x) in 18
# iterations; 100 left the wrap at 2.7x after 30, 10000 took 27 iterations to the same 1.19x.
SOFTNESS = 1000.0
# The solver defaults of each model, read by the panel's selection (scene_io.physics_defaults), its
# presets and bake.py, so they cannot drift: the initial guess, the solver steps per frame (0: the
# physics' own, a cloth's quality) and ``soft`` (0: hard initial conditions, else eps). Blender cloth
# solves on the frame grid from its cache with soft first frames: the 150-vertex quality-5 flag with the
# former defaults (fast projection, 5 sub-steps, hard) had not finished after 27 min; with these it
# converged in 26 iterations, 245 s, and the README's job in 18 s. A cloth driven by forcing that repeats
# (the flag_gusts and ribbons samples) converges better from the solver's own simulation: from the cache it
# stops in a local minimum (README, "A flag that waves and loops"); so cloth starts from both
# ("cache_or_forward", solver_core.clip_loop). The other models keep the paper's start, their own steps and
# hard frames.
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


assert set(names(SCHEMES)) == {"auto", *sc.SCHEMES} and names(INITS) == sc.CLIP_INITS
assert set(SCHEME_OF_MODEL) == set(MODEL_DEFAULTS) == set(names(MODELS)) - {"auto"}
assert all(d["init"] in sc.CLIP_INITS and d["soft"] >= 0 for d in MODEL_DEFAULTS.values())
