"""The README's Python examples run as pasted (extracted from its ```python blocks)."""

import re
from pathlib import Path

import pytest

from tests.conftest import shared_data_dir

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_python_example_runs_as_pasted(index, monkeypatch):
    code = BLOCKS[index]
    if "jax.distributed.initialize" in code:
        pytest.skip("the multi-host example needs a second host")
    if 'load_dataset("cifar10")' in code or "speech_commands" in code:
        root = shared_data_dir()
        if root is None:
            pytest.skip("no offline data folder (FELIX_JAX_DATA)")
        monkeypatch.setenv("FELIX_JAX_DATA", str(root))
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": "__readme__"})
