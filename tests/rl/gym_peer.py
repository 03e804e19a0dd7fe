"""What the Gymnasium trace scripts (gym_trace.py, gym_vector_trace.py) share: Gymnasium 1.4 itself,
or a failure (not a skip) that names the fix, and how they write arrays to JSON."""
import sys

try:
    import gymnasium
    import numpy as np
except ImportError as e:
    sys.exit(f"FAIL: {e}: gym_equivalence_test compares against Gymnasium 1.4. "
             "Install the test peers: scripts/install-deps.sh --test")
if not gymnasium.__version__.startswith("1.4."):
    sys.exit(f"FAIL: gymnasium {gymnasium.__version__} is installed; gym_equivalence_test compares against "
             "Gymnasium 1.4. Install the pinned test peers: scripts/install-deps.sh --test")


def floats(a):
    """The values of an array or scalar as Python floats (json writes them exactly)."""
    return [float(v) for v in np.asarray(a).ravel()]
