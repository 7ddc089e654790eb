"""A Blender mesh's arrays, read in bulk (``foreach_get``): what the scene reader and the writers share."""
import numpy as np


def mesh_arrays(mesh):
    """The arrays of a Blender mesh.

    Parameters
    ----------
    mesh : bpy.types.Mesh
        The mesh (its ``loop_triangles`` computed).

    Returns
    -------
    tuple
        Vertex positions (n, 3), polygons (a list of index arrays), triangles (T, 3) and edges (E, 2).
    """
    co = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", co)
    starts = np.empty(len(mesh.polygons), np.int64)
    mesh.polygons.foreach_get("loop_start", starts)
    corners = np.empty(len(mesh.loops), np.int64)
    mesh.loops.foreach_get("vertex_index", corners)
    faces = np.split(corners, starts[1:]) if len(starts) else []
    tris = np.empty(len(mesh.loop_triangles) * 3, np.int64)
    mesh.loop_triangles.foreach_get("vertices", tris)
    edges = np.empty(len(mesh.edges) * 2, np.int64)
    mesh.edges.foreach_get("vertices", edges)
    return co.reshape(-1, 3), faces, tris.reshape(-1, 3), edges.reshape(-1, 2)
