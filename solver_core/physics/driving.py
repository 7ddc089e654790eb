"""Driving forces designed with the loop: the periodic energy source a damped loop needs to keep moving.

A damped model has rest as its only exact periodic motion (the paper's Section 6, "Damping"), so a loop that
keeps a simulation's motion needs forces the scene could plausibly have. A driving family adds a force
``f_j(q, theta_j)`` to every residual row j, with per-step parameters ``theta_j`` solved beside q
(``solver_core.optimize.driven``):

- ``WindDrive``: a wind vector d_j per step added to the scene's wind, acting through the scene's ``Wind`` law
  (pressure along the triangles' normals, linear in the wind: f_j = G(q_j) d_j);
- ``ModesDrive``: smooth body forces, 3 coefficients per step of each of the mesh's lowest graph-Laplacian
  modes (an acceleration field f_j = M Phi c_j with Phi M-orthonormal, so |f_j|^2_{M^-1} = |c_j|^2).

Both are zero on pinned vertices (a pin supplies whatever force it takes). The choice between them and its
evidence: docs/design/motion.md.
"""
import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .models.external import Wind
from .models.nbody import NBodyGravity
from .residual import force_steps

FAMILIES = ("auto", "wind", "modes", "none")
_DENSE_EIGEN_MAX = 1500     # vertices up to which the Laplacian's modes come from a dense eigensolver


class WindDrive:
    """A designed wind: per step a vector ``d_j`` (3 parameters) added to the scene's wind term ``wind``.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem; its model holds ``wind``.
    wind : Wind
        The scene's wind term (its triangles and pressure coefficient).
    """

    name = "wind"

    def __init__(self, prob, wind):
        self.prob, self.term = prob, wind
        self.per_step = 3
        self.rows, times = force_steps(prob)
        self.scene = wind._wind_at(times, prob.n_steps).copy()     # (n_steps, 3) the scene's wind per row
        self.pattern = wind.jacobian_pattern()

    def forces(self, q, theta):
        """The driving force (n_steps, n, 3) of the rows at the trajectory q, parameters theta (n_steps, 3)."""
        f = self.term.forces_in(q[self.rows], theta)
        f[:, self.prob.pins] = 0.0
        return f

    def per_parameter(self, q):
        """The force of a unit parameter (n_steps, n, 3, 3): d f_j / d theta_j, zero on the pins."""
        unit = np.stack([self.term.forces_in(q[self.rows], np.broadcast_to(np.eye(3)[axis], (self.prob.n_steps, 3)))
                         for axis in range(3)], axis=-1)
        unit[:, self.prob.pins] = 0.0
        return unit

    def position_values(self, q, theta):
        """d f_j / d q at the positions row j sees: values (n_steps, nnz) on ``pattern`` (rows, cols in 3n)."""
        return self.term.jacobian_values_in(q[self.rows], theta)

    def total_wind(self, theta):
        """The wind each row feels (n_steps, 3): the scene's plus the designed one."""
        return self.scene + np.asarray(theta).reshape(-1, 3)


class ModesDrive:
    """Smooth body forces: 3 coefficients per step of each of the mesh's ``k`` lowest Laplacian modes.

    Parameters
    ----------
    prob : LoopProblem
        The loop problem; its model has a mesh (``Model.mesh_edges``).
    k : int
        How many modes.
    """

    name = "modes"

    def __init__(self, prob, k):
        self.prob = prob
        self.phi = laplacian_modes(prob.model, k)               # (n, k)
        self.per_step = 3 * self.phi.shape[1]
        self.rows, _ = force_steps(prob)
        self.pattern = None                                      # the force does not depend on q

    def forces(self, q, theta):
        c = np.asarray(theta).reshape(self.prob.n_steps, -1, 3)
        f = self.prob.model.mass[None, :, None] * np.einsum("ik,jkc->jic", self.phi, c)
        f[:, self.prob.pins] = 0.0
        return f

    def per_parameter(self, q):
        n, k = self.phi.shape
        unit = np.zeros((n, 3, k, 3))
        mphi = self.prob.model.mass[:, None] * self.phi
        for c in range(3):
            unit[:, c, :, c] = mphi
        unit[self.prob.pins] = 0.0
        return np.broadcast_to(unit.reshape(n, 3, 3 * k)[None], (self.prob.n_steps, n, 3, 3 * k))


def coupled_pairs(model):
    """(E, 2) vertex pairs i < j that the model's force terms couple: its mesh (``Model.mesh_edges``), else the
    pairs of every term's Jacobian pattern (Blender cloth's springs and hinges); empty for N bodies, whose
    gravity couples every pair without a mesh."""
    edges = model.mesh_edges()
    if len(edges):
        return edges
    terms = [t for t in getattr(model, "terms", ()) if not isinstance(t, NBodyGravity)]
    pairs = [np.stack(term.jacobian_pattern(), axis=1) // 3 for term in terms]
    pairs = np.concatenate(pairs) if pairs else np.zeros((0, 2), dtype=np.int64)
    return np.unique(pairs[pairs[:, 0] < pairs[:, 1]], axis=0)


def laplacian_modes(model, k):
    """The ``k`` lowest eigenvectors (n, k) of the mesh's graph Laplacian, L phi = lambda M phi, M-orthonormal.

    Parameters
    ----------
    model : Model
        A model with a mesh (``mesh_edges``) and vertex masses.
    k : int
        How many modes (the constant one first).

    Returns
    -------
    ndarray, shape (n, k)
        The modes.
    """
    n, mass = model.n_vertices, model.mass
    e = coupled_pairs(model)
    if len(e) == 0:
        raise ValueError("body modes need a mesh: this model has no edges")
    k = min(int(k), n)
    A = sp.csr_matrix((np.ones(2 * len(e)), (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n))
    A.data[:] = 1.0
    L = sp.diags(np.asarray(A.sum(axis=1)).ravel()) - A
    if n <= _DENSE_EIGEN_MAX:
        _, vectors = scipy.linalg.eigh(L.toarray(), np.diag(mass))
        return vectors[:, :k]
    values, vectors = spla.eigsh(L.tocsc(), k=k, M=sp.diags(mass).tocsc(), sigma=-1e-6 * float(L.diagonal().max()))
    return vectors[:, np.argsort(values)]


def choose_drive(prob, family="auto", modes=6):
    """The driving family of ``prob``: a ``WindDrive``, a ``ModesDrive`` or None (pure physics).

    Parameters
    ----------
    prob : LoopProblem
        The loop problem.
    family : str
        One of FAMILIES: "auto" takes the scene's wind when the model has a ``Wind`` term, else the body modes
        when it has a mesh, else None (N bodies); "none" is the paper's pure physics.
    modes : int
        Modes of the body-force family.

    Returns
    -------
    WindDrive, ModesDrive or None

    Raises
    ------
    ValueError
        For an unknown family, "wind" without a wind term, or "modes" without a mesh.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown driving force {family!r}; choose one of {', '.join(FAMILIES)}")
    if family == "none":
        return None
    winds = [t for t in getattr(prob.model, "terms", ()) if isinstance(t, Wind)]
    if family in ("auto", "wind") and winds:
        return WindDrive(prob, winds[0])
    if family == "wind":
        raise ValueError("the scene has no wind to design gusts for: add a Wind force field, or choose the body "
                         "modes")
    if len(coupled_pairs(prob.model)) == 0:
        if family == "modes":
            raise ValueError("body modes need a mesh: this model has no edges")
        return None
    return ModesDrive(prob, modes)
