"""Makes the shared test helpers (``derivatives``) importable from every test module; lets the bpy module's
process leave once pytest has reported (see pytest_unconfigure)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session, exitstatus):
    session.config._cyclic_loop_exitstatus = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave the bpy 4.5 module's process without its C++ exit handlers once pytest has reported.

    When the add-on's handlers stay registered (a test that loads a file drops the add-on from the enabled
    list, so its fixture cannot disable it), the module's exit can wait forever in the destructor of its
    delayed file-close thread (pthread_cond_destroy on a condition that thread still waits on; seen with gdb).
    The results are final by now; only the wheel's process (no Blender binary) leaves this way."""
    bpy = sys.modules.get("bpy")
    if bpy is None or getattr(bpy.app, "binary_path", None) != "":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(getattr(config, "_cyclic_loop_exitstatus", 0))

