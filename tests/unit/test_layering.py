"""The direction of dependencies (DESIGN.md): catcap.metrics imports nothing else of catcap but the
leaf utilities catcap.atomic (atomic file writes) and catcap.cache (the cache folder), which
import nothing of catcap at all."""

import subprocess
import sys

PROBE = """
import sys, importlib, pkgutil
import catcap.metrics
for m in pkgutil.iter_modules(catcap.metrics.__path__):
    importlib.import_module("catcap.metrics." + m.name)
loaded = sorted(m for m in sys.modules if m.startswith("catcap"))
print("\\n".join(loaded))
print("TORCH" if "torch" in sys.modules else "NO-TORCH")
"""

LEAVES = {"catcap", "catcap.atomic", "catcap.cache", "catcap.faults"}  # below every layer: import nothing of catcap
LEAF_IMPORTS = {"catcap.atomic": ["catcap.faults"]}  # but each other, as listed (the fault points of atomic writes)


def test_metrics_loads_nothing_else_of_catcap():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    modules = [m for m in out if m.startswith("catcap")]
    assert "catcap.metrics.evaluate" in modules and "catcap.metrics.cider" in modules
    others = [m for m in modules if m not in LEAVES and not m.startswith("catcap.metrics")]
    assert others == [], f"catcap.metrics imported other catcap layers: {others}"


def test_leaf_utilities_import_nothing_of_catcap():
    for leaf in ("catcap.atomic", "catcap.cache", "catcap.faults"):
        probe = f"import sys, {leaf}; print(' '.join(sorted(m for m in sys.modules if m.startswith('catcap'))))"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
        assert out == sorted(["catcap", leaf, *LEAF_IMPORTS.get(leaf, [])]), out


def test_metrics_does_not_import_torch():
    """Evaluation stays light: scoring a result file never loads PyTorch."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "NO-TORCH"
