"""Scripts the tests run as a bake process (under the bpy module or Blender's executable)."""

# bake.py that waits on stdin once every output is renamed into place, so a test can send SIGTERM at that point
TERMINATED_AFTER_THE_RENAMES = """import os, sys
sys.path.insert(0, {root!r})
from cyclic_loop_addon import bake
say = bake._say


def _say(text):
    say(text)
    if text.startswith("wrote "):       # every output renamed into place; the run is not over yet
        sys.stdin.readline()            # the test sends SIGTERM here


bake._say = _say
bake.leave(bake.main(sys.argv))
"""
