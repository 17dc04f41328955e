"""tests/startup/: what every process of the suite starts with. The deferred imports change when
scikit-learn and scipy.stats are imported, never what a caller gets from them; torch._dynamo is
imported only where something compiles, and an optimizer computes the same either way; sympy is
imported only for a shape check that does not plainly hold, and every check decides as before."""

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


OPTIMIZER = """
import sys
import torch
from torch.optim import Optimizer
from fairseq.optim.adam import Adam  # fairseq-train's (torch's own Adam.step imports dynamo itself)
torch.manual_seed(0)
p = torch.nn.Parameter(torch.randn(4))
opt = Adam([p], lr=0.1)
for _ in range(3):
    (p ** 2).sum().backward()
    opt.step()
    opt.zero_grad()
opt.load_state_dict(opt.state_dict())
print("torch._dynamo" in sys.modules, p.tolist())
import torch._dynamo  # as torch.compile imports it: from now on, torch's own wrapper
opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))]})
print(getattr(Optimizer.add_param_group.__wrapped__, "__dynamo_disable", None) is not None)
"""


def test_dynamo_is_imported_only_where_something_compiles():
    with_startup = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [STARTUP, os.environ.get("PYTHONPATH")]))}
    plain = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p and p != STARTUP)}
    runs = {}
    for name, env in (("startup", with_startup), ("plain", plain)):
        done = subprocess.run([sys.executable, "-c", OPTIMIZER], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = done.stdout.splitlines()
    (imported, values), (imported_plain, values_plain) = [runs[n][0].split(" ", 1) for n in ("startup", "plain")]
    assert imported == "False" and imported_plain == "True"  # torch imports it for the optimizer on its own
    assert values == values_plain  # the same steps, to the last bit
    assert runs["startup"][1] == runs["plain"][1] == "True"


ATTENTION = """
import sys
import torch
from fairseq.modules import MultiheadAttention  # its forward calls torch's, which checks the mask's shape
torch.manual_seed(0)
attention = MultiheadAttention(8, 2, encoder_decoder_attention=True)
query, key = torch.randn(3, 2, 8), torch.randn(5, 2, 8)
mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
out, _ = attention(query, key, key, key_padding_mask=mask)
print("sympy" in sys.modules, out.flatten().tolist())
for cond in (False, 0, None):  # a check that fails, one that is no bool: torch's own answer
    try:
        torch._check_with(AssertionError, cond, lambda: "a check that fails")
        print("passed")
    except Exception as error:
        print(type(error).__name__, error)
try:
    attention(query, key, key, key_padding_mask=mask[:, :4])
except AssertionError as error:
    print("refused:", error)
"""


def test_sympy_is_imported_only_for_a_check_that_does_not_plainly_hold():
    with_startup = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [STARTUP, os.environ.get("PYTHONPATH")]))}
    plain = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p and p != STARTUP)}
    runs = {}
    for name, env in (("startup", with_startup), ("plain", plain)):
        done = subprocess.run([sys.executable, "-c", ATTENTION], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = done.stdout.splitlines()
    (imported, values), (imported_plain, values_plain) = [runs[n][0].split(" ", 1) for n in ("startup", "plain")]
    assert imported == "False" and imported_plain == "True"  # torch imports it for the first check on its own
    assert values == values_plain  # the same attention, to the last bit
    assert runs["startup"][1:] == runs["plain"][1:]  # every other check decides and says the same
    assert runs["startup"][1:4] == ["AssertionError a check that fails", "TypeError cond must be a bool, but got "
                                    "<class 'int'>", "TypeError cond must be a bool, but got <class 'NoneType'>"]
    assert runs["startup"][4].startswith("refused: Expected key_padded_mask.shape[1] to be 5, but got 4")
