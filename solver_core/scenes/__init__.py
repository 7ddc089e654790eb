"""Scenes that build LoopProblems in code: the paper's examples and the demos."""
