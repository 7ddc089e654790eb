"""Scene -> problem -> solve -> result: reading the scene, the solve (in a child Python or a thread)."""
