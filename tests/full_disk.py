"""Run a command with a small tmpfs mounted at a folder, in a private mount namespace (``unshare``), so
that writes there fail with ENOSPC for real; no mount outlives the command."""
import os
import shutil
import subprocess

import pytest


def namespace():
    """The unshare prefix for a private mount namespace (as root, or as a mapped root user)."""
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.fail("cannot create a mount namespace (unshare -m / -rm) for the full-disk tests")


def run_on_tmpfs(cmd, disk, size_kb, previous=None, timeout=300):
    """Run ``cmd`` with a ``size_kb`` tmpfs at folder ``disk`` holding ``previous`` (name -> bytes) first.

    Returns (CompletedProcess, files left on the tmpfs afterwards: name -> bytes).
    """
    seen = f"{disk}.seen"
    os.makedirs(disk, exist_ok=True)
    os.makedirs(seen, exist_ok=True)
    for name, data in (previous or {}).items():
        with open(os.path.join(seen, name), "wb") as f:
            f.write(data)
    script = (f'mount -t tmpfs -o size={size_kb}k tmpfs "{disk}" || exit 90\n'
              f'cp -a "{seen}/." "{disk}/" && rm -f "{seen}"/*\n'
              '"$@"; status=$?\n'
              f'cp -a "{disk}/." "{seen}/"; exit $status\n')
    proc = subprocess.run([*namespace(), "sh", "-c", script, "sh", *cmd], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode != 90, proc.stderr
    left = {}
    for name in os.listdir(seen):
        with open(os.path.join(seen, name), "rb") as f:
            left[name] = f.read()
    return proc, left
