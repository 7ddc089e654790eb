"""Errors the pipeline raises with a message meant for the user (shown in the UI or printed by bake.py)."""


class LoopError(Exception):
    """Base class: the loop could not be made; the scene and files were left untouched."""


class LoopInputError(LoopError):
    """The scene, the settings or an output path cannot be used; the message says what to change."""


class LoopSolveError(LoopError):
    """The solver failed or diverged; nothing was written."""


class LoopWriteError(LoopError):
    """An output file could not be written (disk full, I/O error); no partial file, any previous one kept."""
