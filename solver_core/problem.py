"""The loop problem: a model, a periodic time grid, initial conditions and pins."""
import numpy as np

from .physics.models.base import sample_periodic
from .physics.scheme import SCHEMES


def _finite_array(name, value, shape):
    arr = np.asarray(value, dtype=float)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


class LoopProblem:
    """A cyclic animation problem (paper eq. 15).

    The loop has ``n_frames`` frames ``dt`` apart; it is solved on ``substeps`` steps per frame
    (step ``h = dt / substeps``, ``n_steps = n_frames * substeps``, the loop closing on that grid).
    Pinned vertices follow their prescription at every frame, frames 0 and 1 included (it takes
    precedence over r0 and r1). With substeps, the state at step 1 is ``r0 + (r1 - r0) / substeps`` and
    animated pins are interpolated linearly between frames.

    Parameters
    ----------
    model : Model
        The force model (masses, force terms, damping) of n vertices.
    n_frames : int
        Frames of the loop (at least 4).
    dt : float
        Seconds between two frames.
    r0, r1 : array_like
        (n, 3) positions at frames 0 and 1.
    scheme : str
        Time scheme, one of SCHEMES.
    eps0, eps1 : float
        0 makes r0 / r1 hard constraints (removed from the unknowns); > 0 soft penalties
        ``|q - r|_M^2 / (2 h^3 eps)``.
    pins : array_like, optional
        Indices of vertices whose positions are prescribed at every frame.
    pin_positions : array_like, optional
        (k, 3) fixed or (n_frames, k, 3) animated positions of the pins; their positions in r0 when None.
    substeps : int
        Solver steps per frame.

    Raises
    ------
    ValueError
        When an argument is out of range, of the wrong shape or not finite.
    """

    def __init__(self, model, n_frames, dt, r0, r1, scheme="symplectic", eps0=0.0, eps1=0.0,
                 pins=None, pin_positions=None, substeps=1):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        if int(n_frames) != n_frames or n_frames < 4:
            raise ValueError(f"a loop needs at least 4 frames, got n_frames={n_frames}")
        if not np.isfinite(dt) or dt <= 0:
            raise ValueError(f"dt must be a positive time step in seconds, got {dt}")
        if int(substeps) != substeps or substeps < 1:
            raise ValueError(f"substeps must be a positive integer, got {substeps}")
        for name, eps in (("eps0", eps0), ("eps1", eps1)):
            if not (eps >= 0) or np.isnan(eps):
                raise ValueError(f"{name} must be >= 0 (0 means a hard constraint), got {eps}")
        n = model.n_vertices
        self.model = model
        self.n_frames = int(n_frames)
        self.dt = float(dt)
        self.substeps = int(substeps)
        self.scheme = scheme
        self.eps0, self.eps1 = float(eps0), float(eps1)
        self.r0 = _finite_array("r0", r0, (n, 3))
        self.r1 = _finite_array("r1", r1, (n, 3))

        pins = np.zeros(0, np.int64) if pins is None else np.asarray(pins).ravel()
        if pins.size and (pins.dtype.kind not in "iu" or pins.min() < 0 or pins.max() >= n):
            raise ValueError(f"pins must be vertex indices in [0, {n}), got {pins.tolist()[:10]}")
        if np.unique(pins).size != pins.size:
            raise ValueError("pins lists a vertex more than once")
        self.pins = pins.astype(np.int64)
        k = self.pins.size
        if pin_positions is None:
            pin_positions = self.r0[self.pins]
        pin_positions = np.asarray(pin_positions, dtype=float)
        if pin_positions.shape == (k, 3):
            pin_positions = np.broadcast_to(pin_positions, (self.n_frames, k, 3))
        self.pin_positions = _finite_array("pin_positions", pin_positions, (self.n_frames, k, 3))

    def softened(self, eps):
        """This problem with soft initial conditions eps0 = eps1 = ``eps`` (> 0), all else the same."""
        return LoopProblem(self.model, self.n_frames, self.dt, self.r0, self.r1, scheme=self.scheme, eps0=eps,
                           eps1=eps, pins=self.pins, pin_positions=self.pin_positions, substeps=self.substeps)

    @property
    def n_vertices(self):
        return self.model.n_vertices

    @property
    def h(self):
        """Solver time step (dt / substeps)."""
        return self.dt / self.substeps

    @property
    def n_steps(self):
        """Length of the periodic solver grid (n_frames * substeps)."""
        return self.n_frames * self.substeps

    def step_times(self, steps):
        """Frame times (float, in frames) of solver steps (any integers, read periodically)."""
        return np.asarray(steps, dtype=float) / self.substeps

    @property
    def r1_step(self):
        """Prescribed state at solver step 1."""
        return self.r0 + (self.r1 - self.r0) / self.substeps

    def pin_path(self, steps):
        """Prescribed pin positions (len(steps), k, 3) at solver steps, periodic in n_steps."""
        return sample_periodic(self.pin_positions, self.step_times(steps))

    def hard(self):
        """(frame-0 hard, frame-1 hard)."""
        return self.eps0 == 0.0, self.eps1 == 0.0

    def free_vertices(self):
        """Boolean (n,): True for the vertices that are not pinned."""
        free = np.ones(self.n_vertices, dtype=bool)
        free[self.pins] = False
        return free

    def free_mask(self):
        """Boolean (n_steps, n, 3): True where q is an unknown of the optimization."""
        mask = np.repeat(self.free_vertices()[None, :, None], self.n_steps, axis=0).repeat(3, axis=2)
        hard0, hard1 = self.hard()
        if hard0:
            mask[0] = False
        if hard1:
            mask[1] = False
        return mask

    def apply_constraints(self, q):
        """Copy of a step-grid trajectory with pins and hard initial conditions imposed."""
        q = np.array(q, dtype=float)
        hard0, hard1 = self.hard()
        if hard0:
            q[0] = self.r0
        if hard1:
            q[1] = self.r1_step
        q[:, self.pins] = self.pin_path(np.arange(self.n_steps))
        return q

    def check_trajectory(self, q, name="q"):
        """Validate a trajectory on the solver grid and return it as a float array."""
        return _finite_array(name, q, (self.n_steps, self.n_vertices, 3))

    def frames_of(self, q_steps):
        """Frames (n_frames, n, 3) of a solver-grid trajectory."""
        return np.asarray(q_steps)[:: self.substeps]

    def steps_of(self, q_frames):
        """A solver-grid trajectory from frames, by periodic linear interpolation (identity if substeps == 1)."""
        q_frames = np.asarray(q_frames, dtype=float)
        if self.substeps == 1:
            return q_frames.copy()
        return sample_periodic(q_frames, self.step_times(np.arange(self.n_steps)))
