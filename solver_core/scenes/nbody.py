"""The N-body scene of paper Section 5.1: equal masses under mutual gravity, seeded random start."""
import numpy as np

from ..physics.models.nbody import NBody
from ..problem import LoopProblem


def nbody_problem(n_bodies=5, n_frames=200, dt=0.01, seed=0, perturbation=0.05, softening=0.0):
    """Bodies of equal mass near a rotating ring whose period is the loop's length, randomly perturbed.

    The masses are chosen (G = 1) so that the unperturbed ring turns once per loop; positions and
    velocities get Gaussian perturbations of relative size ``perturbation`` from ``seed``. The ring
    is unstable, so the forward simulation drifts away from periodic motion: the loop must restore it.
    """
    rng = np.random.default_rng(seed)
    period = n_frames * dt
    angle = 2 * np.pi * np.arange(n_bodies) / n_bodies
    radial = np.stack([np.cos(angle), np.sin(angle), np.zeros(n_bodies)], axis=1)
    tangent = np.stack([-np.sin(angle), np.cos(angle), np.zeros(n_bodies)], axis=1)
    speed = 2 * np.pi / period
    ring_sum = 0.25 * np.sum(1.0 / np.sin(np.pi * np.arange(1, n_bodies) / n_bodies))
    mass = speed ** 2 / ring_sum       # circular orbit of radius 1: v^2 = G m S / R
    pos = radial + perturbation * rng.normal(size=(n_bodies, 3))
    vel = speed * (tangent + perturbation * rng.normal(size=(n_bodies, 3)))
    pos -= pos.mean(axis=0)
    vel -= vel.mean(axis=0)
    model = NBody(np.full(n_bodies, mass), G=1.0, softening=softening)
    return LoopProblem(model, n_frames, dt, pos, pos + dt * vel, scheme="symplectic")
