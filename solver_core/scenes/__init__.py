"""Scenes that build LoopProblems in code: the paper's scenes as Table 1 rebuilds them (``paper``), problems
the size of the paper's flag post, swinging cloth and doughnut (``speed_problems``), N bodies (``nbody``), the
meshes they use (``meshes``) and the N-body demo of ``python -m solver_core demo nbody`` (``demo_nbody``).
They ship with the add-on; the benchmarks that run them live in benchmarks/."""
