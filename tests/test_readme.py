"""The README's Python examples run as pasted (extracted from its ```python blocks)."""

import re
from pathlib import Path

import pytest

from tests.conftest import CIFAR10_FILE, SPEECH_FILE, require_data

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_python_example_runs_as_pasted(index):
    code = BLOCKS[index]
    if "jax.distributed.initialize" in code:
        pytest.skip("the multi-host example needs a second host")
    needed = [f for f, used in ((CIFAR10_FILE, 'load_dataset("cifar10")' in code),
                                (SPEECH_FILE, "speech_commands" in code)) if used]
    require_data(*needed)  # the data folder (tests/conftest.py), or a skip naming the missing files
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})
