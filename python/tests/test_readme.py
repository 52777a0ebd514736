"""The README's Python examples run as written (issue 15): every ```python block of the
README's "## Python" section is executed, in order, from the repository root (the examples
use tests/data/tiny_glm45), each in a fresh interpreter."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


def _python_blocks():
    text = open(os.path.join(REPO, "README.md")).read()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


BLOCKS = _python_blocks()


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_example_runs(index):
    r = subprocess.run([sys.executable, "-c", BLOCKS[index]], cwd=REPO, capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=600)
    assert r.returncode == 0, f"README example {index} failed:\n{BLOCKS[index]}\n{r.stderr}"
