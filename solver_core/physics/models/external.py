"""External forces: uniform gravity, a normal-pressure wind on triangles and the wind's flow (air drag
across the triangles)."""
import numpy as np

from .base import ForceTerm, VelocityTerm, sample_periodic
from .cloth import VertexScatter, block_pattern, check_triangles, cross_matrix, outer


class Gravity(ForceTerm):
    """Constant force ``mass[i] * g`` on every vertex; its Jacobian is zero (empty pattern).

    Parameters
    ----------
    mass : array_like, shape (n,)
        The vertices' masses (kg).
    g : array_like, shape (3,)
        The acceleration of gravity (m/s^2).
    """

    def __init__(self, mass, g=(0.0, 0.0, -9.81)):
        mass = np.asarray(mass, dtype=float)
        g = np.asarray(g, dtype=float)
        if mass.ndim != 1 or g.shape != (3,):
            raise ValueError(f"mass must be 1-D and g a 3-vector, got shapes {mass.shape} and {g.shape}")
        if not np.all(np.isfinite(mass)) or not np.all(np.isfinite(g)):
            raise ValueError("mass and g must be finite")
        self.n_vertices = mass.size
        self.weight = mass[:, None] * g

    def energy(self, q, t=None):
        """Potential energy -sum_i m_i g . q_i of each frame, ``(B,)``."""
        return -np.einsum("bni,ni->b", np.asarray(q, dtype=float), self.weight)

    def forces(self, q, t):
        return np.broadcast_to(self.weight, np.shape(q)).copy()

    def jacobian_pattern(self):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)

    def jacobian_values(self, q, t):
        return np.zeros((np.shape(q)[0], 0))


class Wind(ForceTerm):
    """Wind pressure on triangles: ``coefficient * area * (n . w) n`` per triangle, a third to each corner.

    ``n`` is the unit normal, so the force is area-weighted (a pressure, independent of mesh resolution)
    and independent of the triangle's orientation. ``wind`` is a constant ``(3,)`` vector or ``(P, 3)``
    per-frame samples read periodically at the frame times ``t``.

    Parameters
    ----------
    n_vertices : int
        The mesh's vertex count.
    triangles : array_like of int, shape (T, 3)
        The triangles the wind pushes.
    wind : array_like, shape (3,) or (P, 3)
        The wind vector, constant or sampled per frame (read periodically).
    coefficient : float
        The pressure per unit wind and area.
    """

    def __init__(self, n_vertices, triangles, wind, coefficient=1.0):
        self.n_vertices = int(n_vertices)
        self.triangles = check_triangles(triangles, self.n_vertices)
        wind = np.asarray(wind, dtype=float)
        if wind.shape != (3,) and (wind.ndim != 2 or wind.shape[1] != 3 or wind.shape[0] == 0):
            raise ValueError(f"wind must have shape (3,) or (P, 3), got {wind.shape}")
        if not np.all(np.isfinite(wind)) or not np.isfinite(coefficient):
            raise ValueError("wind and coefficient must be finite")
        self.wind = wind
        self.coefficient = float(coefficient)
        self._scatter = VertexScatter(self.triangles, self.n_vertices)
        self._pattern = block_pattern(self.triangles)

    def _wind_at(self, t, b):
        if self.wind.ndim == 1:
            return np.broadcast_to(self.wind, (b, 3))
        return sample_periodic(self.wind, np.broadcast_to(np.asarray(t, dtype=float), (b,)))

    def _normals(self, q):
        x = np.asarray(q, dtype=float)[:, self.triangles]
        return x, np.cross(x[:, :, 1] - x[:, :, 0], x[:, :, 2] - x[:, :, 0])

    def forces(self, q, t):
        return self.forces_in(q, self._wind_at(t, np.shape(q)[0]))

    def forces_in(self, q, wind):
        """The forces (B, n, 3) at positions q (B, n, 3) in the wind vectors ``wind`` (B, 3), one per row: the
        law is linear in the wind, so a designed wind (``solver_core.driving``) is read through it.

        Parameters
        ----------
        q : ndarray, shape (B, n, 3)
            Positions.
        wind : ndarray, shape (B, 3)
            The wind vector of each row.

        Returns
        -------
        ndarray, shape (B, n, 3)
            The pressure forces on the vertices.
        """
        _, N = self._normals(q)
        w = np.asarray(wind, dtype=float)[:, None, :]
        length = np.linalg.norm(N, axis=-1, keepdims=True)
        # area * (n . w) n = (N . w) N / (2 |N|), split over three corners.
        f = self.coefficient / 6.0 * np.sum(N * w, -1, keepdims=True) * N / length
        return self._scatter(np.repeat(f[:, :, None, :], 3, axis=2))

    def normal_forces(self, q, strength):
        """The forces (B, n, 3) at positions q (B, n, 3) of a wind of ``strength`` blowing along every triangle's
        own normal: the most any wind of that strength pushes each triangle (``c / 6 |w| N`` per corner)."""
        _, N = self._normals(q)
        f = self.coefficient / 6.0 * float(strength) * N
        return self._scatter(np.repeat(f[:, :, None, :], 3, axis=2))

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_dot(self, q, t, s):
        """``dF/dq s`` (B, n, 3) without the Jacobian: each triangle's ``c / 6 ((dN.w) n + (n.w) (dN - (n.dN) n))``
        with n = N / |N| and dN the normal's change along ``s``."""
        x, N = self._normals(q)
        ds = np.asarray(s, dtype=float)[:, self.triangles]
        dN = (np.cross(ds[:, :, 1] - ds[:, :, 0], x[:, :, 2] - x[:, :, 0])
              + np.cross(x[:, :, 1] - x[:, :, 0], ds[:, :, 2] - ds[:, :, 0]))
        w = self._wind_at(t, N.shape[0])[:, None, :]
        n = N / np.linalg.norm(N, axis=-1, keepdims=True)
        across = dN - np.sum(n * dN, -1, keepdims=True) * n
        df = self.coefficient / 6.0 * (np.sum(dN * w, -1, keepdims=True) * n
                                       + np.sum(n * w, -1, keepdims=True) * across)
        return self._scatter(np.repeat(df[:, :, None, :], 3, axis=2))

    def jacobian_values(self, q, t):
        return self.jacobian_values_in(q, self._wind_at(t, np.shape(q)[0]))

    def jacobian_values_in(self, q, wind):
        """``jacobian_values`` in the wind vectors ``wind`` (B, 3), one per row (``forces_in``)."""
        x, N = self._normals(q)
        w = np.broadcast_to(np.asarray(wind, dtype=float)[:, None, :], N.shape)
        length = np.linalg.norm(N, axis=-1)[..., None, None]
        nw = np.sum(N * w, -1)[..., None, None]
        eye = np.eye(3)
        d_force_d_normal = self.coefficient / 6.0 * (outer(N, w) / length
                                                     + nw * (eye / length - outer(N, N) / length**3))
        # dN/dx_a = [x_{a+2} - x_{a+1}]_x (indices mod 3).
        d_normal_d_x = cross_matrix(x[:, :, [2, 0, 1]] - x[:, :, [1, 2, 0]])
        block = np.einsum("btij,btajk->btiak", d_force_d_normal, d_normal_d_x)
        values = np.broadcast_to(block[:, :, None], block.shape[:2] + (3,) + block.shape[2:])
        return values.reshape(values.shape[0], -1)


class WindFlow(VelocityTerm):
    """The relative-velocity part of Blender's face wind (a wind field's Flow): each corner k of a triangle
    gets ``-coefficient * area / 12 * (sum_i v_i . n + v_k . n) n`` (``SIM_mass_spring_force_face_wind`` on
    the per-vertex wind ``-flow * v``: a quarter of the pressure on its own vertex, three quarters shared),
    so the triangle's normal velocity is damped in proportion to its area.
    """

    def __init__(self, n_vertices, triangles, coefficient):
        self.n_vertices = int(n_vertices)
        self.triangles = check_triangles(triangles, self.n_vertices)
        if not (np.isfinite(coefficient) and coefficient >= 0):
            raise ValueError(f"coefficient must be finite and non-negative, got {coefficient}")
        self.coefficient = float(coefficient)
        self._scatter = VertexScatter(self.triangles, self.n_vertices)
        self._pattern = block_pattern(self.triangles)
        self._mix = np.ones((3, 3)) + np.eye(3)   # corner k sees sum_i v_i + v_k

    def _state(self, q, v):
        x = np.asarray(q, dtype=float)[:, self.triangles]
        N = np.cross(x[:, :, 1] - x[:, :, 0], x[:, :, 2] - x[:, :, 0])
        mixed = np.einsum("kc,btcj->btkj", self._mix, np.asarray(v, dtype=float)[:, self.triangles])
        return x, N, np.linalg.norm(N, axis=-1), mixed

    def forces(self, q, v, t):
        _, N, length, mixed = self._state(q, v)
        # area n n^T = N N^T / (2 |N|)
        speed = np.einsum("btj,btkj->btk", N, mixed) / length[..., None]
        return self._scatter(-self.coefficient / 24.0 * speed[..., None] * N[:, :, None, :])

    def jacobian_pattern(self):
        return self._pattern

    def jacobian_values(self, q, v, t):
        x, N, length, mixed = self._state(q, v)
        c = -self.coefficient / 24.0
        nn = outer(N, N) / length[..., None, None]
        g_v = c * self._mix[None, None, :, None, :, None] * nn[:, :, None, :, None, :]
        # d/dN of N (N . a) / |N| for each corner's a = mixed[k]
        na = np.einsum("btj,btkj->btk", N, mixed)[..., None, None]
        eye, L = np.eye(3), length[..., None, None, None]
        d_dN = ((N[:, :, None, :, None] * mixed[:, :, :, None, :] + na * eye) / L
                - na * outer(N, N)[:, :, None] / L ** 3)
        d_normal_d_x = cross_matrix(x[:, :, [2, 0, 1]] - x[:, :, [1, 2, 0]])    # dN/dx_a = [x_{a+2} - x_{a+1}]_x
        g_q = c * np.einsum("btkij,btajl->btkial", d_dN, d_normal_d_x)
        b = g_q.shape[0]
        return g_q.reshape(b, -1), np.broadcast_to(g_v, g_q.shape).reshape(b, -1)
