"""tests/startup/: what every process of the suite starts with. The deferred imports change when
scikit-learn and scipy.stats are imported, never what a caller gets from them."""

import os
import subprocess
import sys

from conftest import STARTUP

CHECK = """
import sys
import fairseq_csan  # fairseq and every task and criterion module
early = [m for m in sys.modules if m.startswith(("sklearn.", "scipy.stats.")) and m != "sklearn.metrics"]
assert not early and type(sys.modules["sklearn.metrics"]).__name__ == "_StandIn", early
from fairseq.criterions import sentence_prediction as criterion
from fairseq.tasks import audio_classification as task
print(criterion.f1_score([0, 1, 1, 0], [0, 1, 0, 0]), round(criterion.pearsonr([1, 2, 3], [1, 2, 4])[0], 6))
import sklearn, sklearn.metrics, sklearn.utils, scipy.stats
assert task.sklearn_metrics.roc_curve is sklearn.metrics.roc_curve is sys.modules["sklearn.metrics"].roc_curve
assert sklearn.utils is sys.modules["sklearn.utils"] and type(sys.modules["sklearn"]).__name__ == "module"
assert criterion.spearmanr.__name__ == "spearmanr" and scipy.stats.norm.cdf(0) == 0.5
print(sklearn.metrics.f1_score([0, 1, 1, 0], [0, 1, 0, 0]), round(scipy.stats.pearsonr([1, 2, 3], [1, 2, 4])[0], 6))
"""


def test_deferred_imports_give_the_real_functions():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [STARTUP, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    deferred, real = done.stdout.splitlines()
    assert deferred == real == "0.6666666666666666 0.981981"
