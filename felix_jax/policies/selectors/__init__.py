"""Client selectors; a new one is one file plus one line in ``SELECTORS``.

``*_math`` modules hold the pure, vectorised formulas the selectors use.
"""

from .base import SelectionContext, Selector
from .oort import make_oort_selector
from .random_selector import make_random_selector
from .refl import make_refl_selector
from .tierselect_eval import make_tierselect_eval

SELECTORS = {
    "random": make_random_selector,
    "oort": make_oort_selector,
    "refl": make_refl_selector,
    "tierselect-eval": make_tierselect_eval,
}

__all__ = ["SELECTORS", "SelectionContext", "Selector", "make_oort_selector", "make_random_selector",
           "make_refl_selector", "make_tierselect_eval"]
