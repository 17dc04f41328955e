"""A checkpoint reloaded as fairseq-generate reloads it computes exactly what the built model
computes: eval mode, with and without padding, encoder and decoder, every architecture family.

fairseq 0.12.2 moves an encoder layer whose state dict was loaded onto torch's fused
encoder-layer kernel in eval mode, which knows nothing of our attention (see
``_FUSED_PATH_COPIES`` in fairseq_csan/models/variant_transformer.py): under that fairseq
these tests fail without our guard. Under fairseq versions without the fused path they check
that saving and reloading changes nothing.
"""

import sys

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

from conftest import TINY, build_model

# one architecture per family: the Transformer (our model with no variant: K = 0), 1D/2D CSAN,
# context-aware, both, and each locality baseline of the CSAN paper's Table 1
FAMILIES = {
    "transformer": ("transformer_csan1d", ["--csan-layers", "0"]),
    "csan1d": ("transformer_csan1d", ["--csan-window", "3"]),
    "csan2d": ("transformer_csan2d", ["--csan-window", "3"]),
    "ctxaware": ("transformer_ctxaware", []),
    "csan2d_ctxaware": ("transformer_csan2d_ctxaware", ["--csan-window", "3"]),
    "ctxaware_decoder": ("transformer_ctxaware", ["--ctx-side", "both"]),
    **{variant: (f"transformer_{variant}", []) for variant in
       ["bidirect", "relpos", "neighbor", "local_hard", "local_soft", "block", "cnn"]},
}


def save_as_fairseq_does(model, args, path):
    """The keys fairseq's Trainer.save_checkpoint writes, through its own writer."""
    checkpoint_utils.torch_persistent_save(
        {"args": None, "model": model.state_dict(),
         "cfg": OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True),
         "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                                "lr_scheduler_state": {}, "num_updates": 0}],
         "extra_state": {}},
        str(path),
    )


def batch(pad_index: int, padded: bool):
    torch.manual_seed(3)
    tokens = torch.randint(4, 50, (3, 9))
    if padded:
        for row, length in enumerate([9, 6, 2]):
            tokens[row, :9 - length] = pad_index  # fairseq pads sources on the left
    return tokens, tokens.ne(pad_index).sum(1), torch.randint(4, 50, (3, 7))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reloaded_checkpoint_computes_what_the_built_model_computes(family, tmp_path):
    arch, flags = FAMILIES[family]
    built, args, task = build_model(arch, TINY + flags)
    built.eval()
    path = tmp_path / "checkpoint.pt"
    save_as_fairseq_does(built, args, path)
    models, _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)  # as fairseq-generate
    reloaded = models[0].eval()
    assert type(reloaded) is type(built)
    assert reloaded.state_dict().keys() == built.state_dict().keys()
    for padded in (False, True):
        tokens, lengths, prev = batch(task.source_dictionary.pad(), padded)
        with torch.no_grad():
            want = built.encoder(tokens, lengths)
            got = reloaded.encoder(tokens, lengths)
            torch.testing.assert_close(got["encoder_out"][0], want["encoder_out"][0], rtol=0, atol=0)
            torch.testing.assert_close(reloaded(tokens, lengths, prev)[0], built(tokens, lengths, prev)[0],
                                       rtol=0, atol=0)


def test_no_layer_of_ours_holds_fused_path_copies():
    """fairseq 0.12.2's layer holds copies of its weights for the fused path; ours do not, so
    parameter counts and checkpoints are the model's own (under every fairseq)."""
    model, _, _ = build_model("transformer_csan2d", TINY)
    names = [n for n, _ in model.named_parameters()]
    assert not [n for n in names if n.rsplit(".", 1)[-1] in ("in_proj_weight", "fc1_weight", "fc2_weight")]


# ---- a checkpoint of other settings is refused, as fairseq's Trainer loads it on resume ----------
@pytest.mark.parametrize("saved,loaded,named", [
    (("transformer_csan2d", []), ("transformer_csan1d", []), ["--arch transformer_csan2d", "--arch transformer_csan1d",
                                                              "--encoder-self-attention csan2d (checkpoint) vs csan1d"]),
    (("transformer_csan1d", []), ("transformer_csan1d", ["--csan-window", "5"]), ["--csan-window 11 (checkpoint) vs 5"]),
    (("transformer_csan2d", []), ("transformer_csan2d", ["--csan-layers", "2"]), ["--csan-layers 3 (checkpoint) vs 2"]),
    (("transformer_ctxaware", []), ("transformer_ctxaware", ["--ctx-gate", "query"]), ["--ctx-gate both (checkpoint) vs query"]),
    (("transformer_ctxaware", []), ("transformer_csan1d", ["--csan-layers", "0"]), ["--ctx-type deep-global+deep (checkpoint) vs None"]),
])
def test_a_checkpoint_of_other_settings_is_refused_naming_them(saved, loaded, named):
    source, _, _ = build_model(saved[0], TINY + saved[1])
    target, args, _ = build_model(loaded[0], TINY + loaded[1])
    state = source.state_dict()
    with pytest.raises(ValueError) as refusal:  # Trainer.load_checkpoint's call
        target.load_state_dict(state, strict=True, model_cfg=convert_namespace_to_omegaconf(args).model)
    for words in named:
        assert words in str(refusal.value)


def test_how_the_attention_is_computed_is_no_difference():
    source, _, _ = build_model("transformer_csan2d", TINY)
    target, _, _ = build_model("transformer_csan2d", TINY + ["--csan-impl", "banded"])
    target.load_state_dict(source.state_dict(), strict=True)


def test_a_checkpoint_without_settings_loads(tmp_path):
    """Checkpoints written before the settings were kept, and fairseq's own Transformer's."""
    stock, _, _ = build_model("transformer", TINY)
    model, _, _ = build_model("transformer_csan1d", TINY + ["--csan-layers", "0"])
    model.load_state_dict(stock.state_dict(), strict=True)
    old = {k: v for k, v in model.state_dict().items() if k != model.SETTINGS_KEY}
    model.load_state_dict(old, strict=True)


# ---- a deliberate warm start (fairseq-train --finetune-from-model) loads the shared weights -------
@pytest.mark.parametrize("saved,loaded", [
    (("transformer_csan1d", []), ("transformer_csan2d", [])),  # the same parameters, other settings
    (("transformer_csan2d", []), ("transformer_ctxaware", [])),  # the target has gating parameters of its own
    (("transformer_ctxaware", []), ("transformer_csan1d", [])),  # the checkpoint has parameters the target lacks
    (("transformer", []), ("transformer_ctxaware", [])),  # fairseq's own Transformer, the papers' baseline
])
def test_a_warm_start_takes_the_shared_weights_and_says_so(saved, loaded, caplog):
    from fairseq_csan.models import variant_transformer

    source, _, _ = build_model(saved[0], TINY + saved[1], seed=1)
    target, args, _ = build_model(loaded[0], TINY + loaded[1], seed=2)
    own = {k: v.clone() for k, v in target.state_dict().items()}
    variant_transformer._WARM_STARTS.append("pretrained.pt")
    try:
        target.load_state_dict(source.state_dict(), strict=True, model_cfg=convert_namespace_to_omegaconf(args).model)
    finally:
        variant_transformer._WARM_STARTS.pop()
    theirs = source.state_dict()
    for k, v in target.state_dict().items():
        if k.endswith("embed_positions._float_tensor"):
            # fairseq 0.12.2 keeps this placeholder of one uninitialised float in the state dict
            # (it only carries a dtype and device, and fairseq's own upgrade replaces it on load)
            assert v.shape == (1,) and v.dtype == own[k].dtype
            continue
        if k == target.SETTINGS_KEY:
            assert torch.equal(v, own[k])  # the target's own settings, not the checkpoint's
        elif k in theirs:
            assert torch.equal(v, theirs[k]), k
        else:
            assert torch.equal(v, own[k]), k  # a parameter of the target's own keeps its initial value
    was = "a model without our settings (fairseq's own)" if saved[0] == "transformer" else f"--arch {saved[0]}"
    assert f"warm start from pretrained.pt ({was}) into --arch {loaded[0]}" in caplog.text
    assert not variant_transformer._WARM_STARTS


@pytest.mark.slow
def test_our_train_command_warm_starts_where_fairseq_train_refuses(data_bin, tmp_path):
    """python -m fairseq_csan.train marks fairseq-train's --finetune-from-model (patches.py), in
    its own process and in the workers fairseq spawns from it; stock fairseq-train does not, and
    refuses a checkpoint of other settings as on a resume, naming the command that warm-starts."""
    from conftest import REPO, VENV_BIN, launch, succeed

    common = [data_bin, "--user-dir", REPO / "fairseq_csan", *TINY, "--optimizer", "adam", "--lr", "0.001",
              "--max-tokens", "500", "--cpu", "--num-workers", "0", "--no-epoch-checkpoints", "--log-format", "simple"]
    succeed([VENV_BIN / "fairseq-train", *common, "--arch", "transformer_csan2d", "--max-update", "2",
             "--save-dir", tmp_path / "csan2d"])
    pretrained = tmp_path / "csan2d" / "checkpoint_last.pt"
    warm = ["--arch", "transformer_csan1d", "--max-update", "3", "--finetune-from-model", pretrained]
    done, log = launch([VENV_BIN / "fairseq-train", *common, *warm, "--save-dir", tmp_path / "stock"])
    assert done.returncode != 0 and "--encoder-self-attention csan2d (checkpoint) vs csan1d (this command)" in log
    assert "on purpose: python -m fairseq_csan.train ... --finetune-from-model CHECKPOINT" in log
    log = succeed([sys.executable, "-m", "fairseq_csan.train", *common, *warm, "--save-dir", tmp_path / "ours",
                   "--distributed-world-size", "2"])
    assert log.count(f"warm start from {pretrained} (--arch transformer_csan2d) into --arch transformer_csan1d") == 2
    assert "training on 2 devices" in log and (tmp_path / "ours" / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize("arch,flag,value", [("transformer_csan1d", "csan_window", 11),
                                             ("transformer_csan2d", "csan_heads", 3),
                                             ("transformer_relpos", "relpos_tables", "per-head")])
def test_a_checkpoint_saved_before_a_flag_existed_loads_as_the_model_it_was(arch, flag, value):
    """A variant's new flag comes with the default that computes what the model computed before:
    a checkpoint without that setting loads into a model with the default, and is refused, naming
    the flag, by one built with another value."""
    import json

    from fairseq_csan.models.variant_transformer import _decode, _encode

    source, _, _ = build_model(arch, TINY)
    state = source.state_dict()
    saved = _decode(state[source.SETTINGS_KEY])
    assert saved["settings"][flag] == value
    del saved["settings"][flag]  # as a checkpoint written before the flag was added
    state[source.SETTINGS_KEY] = _encode(saved["settings"], saved["arch"])
    target, _, _ = build_model(arch, TINY)
    target.load_state_dict(state, strict=True)
    assert json.loads(bytes(target.state_dict()[target.SETTINGS_KEY].tolist()).decode())["settings"][flag] == value
    other = {"csan_window": "5", "csan_heads": "1", "relpos_tables": "shared"}[flag]
    changed, _, _ = build_model(arch, TINY + [f"--{flag.replace('_', '-')}", other])
    with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} {value} \\(checkpoint\\) vs {other}"):
        changed.load_state_dict(state, strict=True)
