"""The fixes to fairseq that importing fairseq_csan applies, each only where the running fairseq
and torch have the fault: every check against a faulty and a sound stand-in, and the fixes
themselves against fairseq; and for every change that patches.py lists, that what it relies on
in fairseq and torch (parameters, the call that takes it up, attributes) is still there."""

import argparse
import inspect
import os
import pickle
import re
import types
import warnings

import numpy as np
import pytest
import torch
from fairseq.data import data_utils

from fairseq_csan import fairseq_compat, patches
from fairseq_csan.data_parallel import DistributedDataParallelAnyDevice, broadcast_rank0_object
from fairseq_csan.fairseq_compat import allow_fairseq_checkpoints, apply_fixes


@pytest.mark.skipif(not fairseq_compat.torch_load_is_weights_only(),
                    reason=f"torch {torch.__version__} loads without weights_only by default (before 2.6): "
                           "no allow-list needed")
def test_checkpoints_need_exactly_the_namespace_allow_list(tmp_path):
    """Without the allow-list torch >= 2.6 refuses a fairseq checkpoint; with it, torch
    still refuses a class that could run code."""
    path = tmp_path / "state.pt"
    torch.save({"args": argparse.Namespace(arch="transformer_csan2d"), "w": torch.ones(2)}, path)
    try:
        torch.serialization.clear_safe_globals()
        with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
            torch.load(path)
    finally:
        assert allow_fairseq_checkpoints()
    assert torch.load(path)["args"].arch == "transformer_csan2d"
    torch.save({"f": print}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)


@pytest.mark.parametrize("n,mult,max_tokens,max_sentences", [
    (500, 8, 8000, None), (500, 8, None, 64), (37, 8, 200, None), (16, 8, 1000, None), (3, 8, 100, None),
    (500, 1, 8000, None),
])
def test_batches_cover_every_sentence(n, mult, max_tokens, max_sentences):
    """fairseq-generate must translate the whole test set: no index is left out."""
    sizes = np.sort(np.random.RandomState(n).randint(3, 20, n)).astype(np.int64)
    indices = np.arange(n, dtype=np.int64)
    batches = data_utils.batch_by_size(
        indices, lambda i: sizes[i], max_tokens=max_tokens, max_sentences=max_sentences,
        required_batch_size_multiple=mult,
    )
    assert np.array_equal(np.concatenate(batches), indices)
    for b in batches[:-1]:  # the batching rules stand for every full batch
        assert len(b) % mult == 0
        assert max_tokens is None or len(b) * sizes[b].max() <= max_tokens
        assert max_sentences is None or len(b) <= max_sentences
    # the fix only appends what fairseq left out: every batch fairseq made is unchanged
    original = getattr(data_utils.batch_by_size, "__wrapped__", data_utils.batch_by_size)(
        indices, lambda i: sizes[i], max_tokens=max_tokens, max_sentences=max_sentences,
        required_batch_size_multiple=mult,
    )
    for ours, theirs in zip(batches, original):
        assert np.array_equal(ours, theirs)


# ---- each fix only where the fault is: stand-ins of a faulty and of a sound fairseq ----------------
def sound_batch_by_size(indices, num_tokens_fn, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
    return [np.asarray(indices)]


def faulty_batch_by_size(indices, num_tokens_fn, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
    indices = np.asarray(indices)
    whole = len(indices) - len(indices) % required_batch_size_multiple
    return [indices[:whole]] if whole else []


def infer_reading_torchrun(cfg, force_distributed=False):  # as fairseq 0.12.2
    if all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")):
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])


def infer_skipping_torchrun_at_one(cfg, force_distributed=False):  # as fairseq-fixed and main
    if cfg.distributed_world_size == 1:
        return
    infer_reading_torchrun(cfg)


def call_main_without_gpu_count(cfg, main, **kwargs):
    return main(cfg, **kwargs)


def call_main_counting_gpus(cfg, main, **kwargs):
    return torch.cuda.device_count()


class DDPWithIds:
    def __init__(self, module, device_id):
        self.kwargs = dict(module=module, device_ids=[device_id])


class DDPWithoutIds:
    def __init__(self, module, device_id):
        self.kwargs = dict(module=module)


def broadcast_with_default_load(obj, src_rank, group, dist_device):
    return torch.load(obj, map_location="cpu")


def broadcast_in_full(obj, src_rank, group, dist_device):
    return torch.load(obj, map_location="cpu", weights_only=False)


def stand_in(faulty: bool):
    """Modules as apply_fixes reads them, of a fairseq with every fault or with none."""
    ddp = types.SimpleNamespace(DistributedFairseqModel=DDPWithIds if faulty else DDPWithoutIds,
                                DistributedDataParallel=object)
    data = types.SimpleNamespace(batch_by_size=faulty_batch_by_size if faulty else sound_batch_by_size)
    dist = types.SimpleNamespace(
        infer_init_method=infer_skipping_torchrun_at_one if faulty else infer_reading_torchrun,
        call_main=call_main_counting_gpus if faulty else call_main_without_gpu_count,
        _broadcast_object_slow=broadcast_with_default_load if faulty else broadcast_in_full)
    return data, dist, ddp


def test_a_faulty_fairseq_gets_every_fix(monkeypatch):
    monkeypatch.setattr(fairseq_compat, "torch_load_is_weights_only", lambda: True)
    data, dist, ddp = stand_in(faulty=True)
    applied = apply_fixes(data, dist, ddp)
    assert {k: v for k, v in applied.items() if k != "1 checkpoints"} == {
        "2 batches": True, "3,5,6 launch": True, "4 ddp": True, "7 broadcast": True}
    assert data.batch_by_size.__wrapped__ is faulty_batch_by_size
    assert [len(b) for b in data.batch_by_size(np.arange(3), lambda i: 1, required_batch_size_multiple=8)] == [3]
    assert dist.call_main.__wrapped__ is call_main_counting_gpus
    assert ddp.DistributedDataParallel is DistributedDataParallelAnyDevice
    assert dist._broadcast_object_slow is broadcast_rank0_object


def test_a_sound_fairseq_is_left_untouched(monkeypatch):
    monkeypatch.setattr(fairseq_compat, "torch_load_is_weights_only", lambda: True)  # even so: 7 is fairseq's
    data, dist, ddp = stand_in(faulty=False)
    before = (dict(vars(data)), dict(vars(dist)), dict(vars(ddp)))
    applied = apply_fixes(data, dist, ddp)
    assert {k: v for k, v in applied.items() if k != "1 checkpoints"} == {
        "2 batches": False, "3,5,6 launch": False, "4 ddp": False, "7 broadcast": False}
    assert (vars(data), vars(dist), vars(ddp)) == before


def test_the_torchrun_probe_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "7")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert fairseq_compat.ignores_torchrun_world_size(infer_skipping_torchrun_at_one)
    assert not fairseq_compat.ignores_torchrun_world_size(infer_reading_torchrun)
    assert os.environ["WORLD_SIZE"] == "7" and "MASTER_ADDR" not in os.environ


def test_an_unknown_fairseq_gets_a_warning_not_a_crash():
    data, dist, ddp = (types.SimpleNamespace() for _ in range(3))  # none of what the checks read
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        applied = apply_fixes(data, dist, ddp)
    named = [str(w.message) for w in caught if "cannot tell whether this fairseq needs fix" in str(w.message)]
    assert len(named) == 4 and not any(v for k, v in applied.items() if k != "1 checkpoints")


def test_the_running_fairseq_got_exactly_the_fixes_its_faults_call_for():
    """Whatever fairseq and torch run the tests: each fix is in place if and only if the
    unfixed code shows the fault."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model

    applied = fairseq_compat.APPLIED
    batch_by_size = getattr(data_utils.batch_by_size, "__wrapped__", data_utils.batch_by_size)
    assert applied["2 batches"] == fairseq_compat.drops_batches(batch_by_size)
    assert applied["2 batches"] == hasattr(data_utils.batch_by_size, "__wrapped__")
    call_main = getattr(distributed_utils.call_main, "__wrapped__", distributed_utils.call_main)
    assert applied["3,5,6 launch"] == (fairseq_compat.ignores_torchrun_world_size(distributed_utils.infer_init_method)
                                       or fairseq_compat.sizes_processes_by_gpus(call_main))
    assert applied["4 ddp"] == (distributed_fairseq_model.DistributedDataParallel is DistributedDataParallelAnyDevice)
    assert applied["7 broadcast"] == (distributed_utils._broadcast_object_slow is broadcast_rank0_object)
    assert applied["1 checkpoints"] == fairseq_compat.torch_load_is_weights_only()


# ---- every change of patches.py: what it relies on is still there ---------------------------------
def leading_parameters(function, n):
    """The first ``n`` parameters of ``function`` as patches.Patch.shape writes them."""
    written = []
    for p in list(inspect.signature(function).parameters.values())[:n]:
        if p.kind is p.VAR_KEYWORD:
            written.append("**" + p.name)
        elif p.kind is p.VAR_POSITIONAL:
            written.append("*" + p.name)
        else:
            written.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return tuple(written)


def changes_of_shape(patch):
    """What of the original that ``patch`` relies on is no longer as it says (empty: all is)."""
    found = patches.original(patch.target)
    shaped = patches.find(patch.shape_of) if patch.shape_of else found
    problems = []
    if patch.shape and leading_parameters(shaped, len(patch.shape)) != patch.shape:
        problems.append(f"{patch.shape_of or patch.target}{inspect.signature(shaped)}, not {patch.shape}")
    for caller, call in patch.called_as:
        if not re.search(call, inspect.getsource(inspect.unwrap(patches.find(caller)))):
            problems.append(f"{caller} no longer calls {call}")
    for attribute in patch.attributes:
        try:
            patches.find(attribute)
        except AttributeError:
            problems.append(f"no {attribute}")
    return problems


@pytest.mark.parametrize("patch", [*patches.AT_IMPORT, *patches.IN_TRAIN_COMMAND], ids=lambda p: p.target)
def test_what_each_patch_relies_on_is_still_there(patch):
    """A fairseq or torch whose function changed shape fails here, naming it, before a wrapper
    written for the old shape meets it."""
    try:
        patches.original(patch.target)
    except AttributeError:  # a fix for a fault this torch has not, on what it has not (add_safe_globals < 2.4)
        assert patch.fix and not fairseq_compat.APPLIED[patch.fix], f"{patch.target} is missing"
        pytest.skip(f"{patch.target}: not in this torch or fairseq, and not needed")
    assert not changes_of_shape(patch)


def test_a_changed_shape_is_named():
    """The check above fails for a shape, a call or an attribute that fairseq does not have."""
    translate = next(p for p in patches.AT_IMPORT if p.target.endswith("GeneratorHubInterface.translate"))
    moved = patches.Patch(translate.target, "", shape=("self", "sentences", "beam=4"),
                          called_as=(("fairseq.hub_utils:from_pretrained", r"\btranslate\("),),
                          attributes=("fairseq.dataclass.configs:GenerationConfig.no_such_setting",))
    problems = changes_of_shape(moved)
    assert len(problems) == 3 and "beam: int = 5" in problems[0]
    assert not changes_of_shape(translate)


def test_the_patches_are_made_once_and_the_originals_kept():
    from fairseq import checkpoint_utils, hub_utils

    assert hub_utils.from_pretrained.__wrapped__ is patches.original("fairseq.hub_utils:from_pretrained")
    assert checkpoint_utils.load_model_ensemble_and_task.__wrapped__ is patches.original(
        "fairseq.checkpoint_utils:load_model_ensemble_and_task")
    translate = hub_utils.GeneratorHubInterface.translate
    patches.apply()  # a second call changes nothing
    assert hub_utils.GeneratorHubInterface.translate is translate
    assert translate.__wrapped__ is patches.original("fairseq.hub_utils:GeneratorHubInterface.translate")


# ---- fix 8: fairseq's import configures logging ----------------------------------------------------
def fresh_python(code):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_what_fairseq_s_import_configures_is_put_back():
    """In a process whose logging nobody configured, the plugin's import of fairseq leaves the root
    logger as it was, and a model load prints nothing. The probe says fairseq's import did
    configure it: a fairseq release that no longer does fails here, and fix 8 can go."""
    done = fresh_python("import logging; import fairseq_csan; from fairseq_csan import fairseq_compat; "
                        "logging.getLogger('fairseq.models.fairseq_model').info('a configuration'); "
                        "print(logging.root.handlers, logging.root.level, fairseq_compat.APPLIED['8 logging'])")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "30", "True"] and done.stderr == ""


@pytest.mark.parametrize("before", ["", "import fairseq; "])
def test_a_logging_configuration_made_before_is_kept(before):
    """A process that configured logging first, or imported fairseq first (as fairseq-train and
    fairseq-generate do), keeps its handlers and level: the fix changes nothing there."""
    done = fresh_python(f"import logging; logging.basicConfig(level=logging.INFO, format='MINE %(message)s'); {before}"
                        "handlers, level = list(logging.root.handlers), logging.root.level; import fairseq_csan; "
                        "from fairseq_csan import fairseq_compat; assert fairseq_compat.APPLIED['8 logging'] is False; "
                        "assert logging.root.handlers == handlers and logging.root.level == level == logging.INFO; "
                        "logging.getLogger('fairseq').info('seen')")
    assert done.returncode == 0 and done.stderr.strip() == "MINE seen", done.stderr[-2000:]
