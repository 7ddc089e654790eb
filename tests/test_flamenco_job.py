"""The Flamenco 3 job type (farm/flamenco/cyclic_loop_bake.js) compiled by node against the stand-in for
Flamenco's job compiler (farm/flamenco/test/): the settings and the bake.py commands it authors."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None and not os.environ.get("CI"), reason="needs node (apt nodejs); under CI it must run")
def test_flamenco_job_type_authors_the_bake_commands():
    proc = subprocess.run([NODE, "--test", os.path.join("farm", "flamenco", "test", "cyclic_loop_bake.test.js")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "# pass 6" in proc.stdout and "# fail 0" in proc.stdout, proc.stdout[-2000:]


def test_flamenco_init_choices_are_the_add_ons_initial_guesses_and_auto():
    """The panel's init is evaluated into the job's setting, so every initial guess the add-on offers (and
    "auto": the model's default) must be a choice of the job type."""
    from cyclic_loop_addon.vocabulary import INITS
    with open(os.path.join(ROOT, "farm", "flamenco", "cyclic_loop_bake.js")) as f:
        script = f.read()
    choices = re.search(r'key: "init".*?choices: \[([^\]]*)\]', script, re.S).group(1)
    assert re.findall(r'"(\w+)"', choices) == ["auto", *(name for name, *_ in INITS)]


@pytest.mark.skipif(NODE is None and not os.environ.get("CI"), reason="needs node (apt nodejs); under CI it must run")
def test_flamenco_object_names_reach_bake_py_as_they_are():
    """Objects as a JSON list: a comma, "+" or a leading "-" stays part of one name (--object=NAME)."""
    proc = subprocess.run([NODE, "--test", os.path.join("farm", "flamenco", "test", "cyclic_loop_objects.test.js")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "# pass 1" in proc.stdout and "# fail 0" in proc.stdout, proc.stdout[-2000:]
