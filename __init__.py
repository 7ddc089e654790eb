"""Cyclic Loop for Blender: the extension / legacy add-on entry point (see cyclic_loop_addon)."""
bl_info = {
    "name": "Cyclic Loop",
    "author": "Cyclic Loop contributors",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "3D Viewport > Sidebar > Loop",
    "description": "Turn a simulated mesh into a seamless loop that still obeys physics",
    "doc_url": "https://doi.org/10.1145/3618309",
    "category": "Animation",
}

from .cyclic_loop_addon import register, unregister  # noqa: E402

__all__ = ["register", "unregister"]
