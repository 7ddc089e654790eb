"""Physical cyclic animations (Jia, Wang, Li, Chern 2023) in numpy/scipy. Never imports bpy.

``__all__`` is the public API: a problem (``LoopProblem``, its models, forces and contacts), the solve
(``make_loop``, ``loop_clip``, ``keep_motion``, ``fast_projection``, ``GaussNewton``, ``simulate``,
``crossfade_clip``) and its tuning (``Options``, ``MotionOptions``), the result and its figures (``LoopResult``, ``residual``, ``loss``,
``loop_metrics``, ``loop_report``), files (``save_problem`` ... ``load_result``) and failures. The other
names imported here (vocabularies, defaults, scene records, report helpers) serve the add-on and the tests;
they are not part of the public API and may move.
"""
from .physics.models.base import ForceTerm, Model, VelocityTerm, sample_periodic
from .physics.models.nbody import NBody, NBodyGravity
from .problem import LoopProblem
from .physics.scheme import SCHEMES
from .physics.residual import residual, loss
from .physics.forward import simulate, SimulationFailed
from .optimize.fast_projection import fast_projection, FastProjectionDiverged
from .optimize.gauss_newton import GaussNewton
from .loop import make_loop, LoopResult, TOL, PHYSICS_TOL, MAX_ITERS, INITS
from .options import Options, MotionOptions, DEFAULTS
from .result import Result, halts
from .clip_loop import loop_clip, crossfade_clip, check_init, LoopFailed, CLIP_INITS
from .motion import keep_motion, driving_force, motion_words, KEPT_SPEED
from .physics.driving import choose_drive, FAMILIES as DRIVES
from .report import loop_report, format_report, progress_line, parse_progress, versions
from .baselines import forward_loop, crossfade_loop
from .metrics import loop_metrics
from .io import save_problem, load_problem, save_result, load_result
from .physics.models.cloth import Cloth, MembraneTerm, BendingTerm
from .physics.models.blender_cloth import BlenderCloth
from .physics.models.external import Gravity, Wind, WindFlow
from .physics.models.softbody import SoftBody, ElasticTetTerm
from .physics.models.contact import FloorContact, SphereContact, MeshContact
from .physics import tetmesh
from .optimize import memory
from .physics.models.blender_settings import (blender_cloth_problem_parts, blender_soft_body_problem_parts,
                                              blender_gravity, CLOTH_SETTINGS_DEFAULTS, SOFT_BODY_SETTINGS)
from .blender_scene import (MeshScene, BodiesScene, Collider, mesh_parts, bodies_parts,
                            problem_from_parts)

__all__ = [
    # the problem
    "LoopProblem", "NBody", "Cloth", "BlenderCloth", "SoftBody",
    "Gravity", "Wind", "FloorContact", "SphereContact", "MeshContact",
    # the solve and its tuning
    "make_loop", "loop_clip", "crossfade_clip", "simulate", "fast_projection", "GaussNewton", "Options",
    "MotionOptions", "keep_motion",
    # the result and its figures
    "LoopResult", "residual", "loss", "loop_metrics", "loop_report",
    # files
    "save_problem", "load_problem", "save_result", "load_result",
    # failures
    "LoopFailed", "SimulationFailed",
]
