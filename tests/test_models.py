"""Every registered architecture: padding, gradients, the checkpoint round trip through
fairseq's own loader, low precision; the CSAN architectures: placement, parameter counts
and bad flags."""

import pytest
import torch
from omegaconf import OmegaConf
from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.modules import MultiheadAttention

from conftest import ARCHS, BASE_ARCHS, TINY, build_model, make_dictionary, small_window
from reference import assert_refused, n_params, skip_without_cpu_kernels
from fairseq_csan.models.variant_transformer import _FUSED_PATH_COPIES
from fairseq_csan.modules import SELF_ATTENTION_VARIANTS

VARIANT_ARCHS = [a for a in ARCHS if "ctxaware" not in a]  # one variant in the lowest layers
CSAN_ARCHS = [a for a in VARIANT_ARCHS if "csan" in a]
PARAMETER_FREE_ARCHS = CSAN_ARCHS + [a for a in VARIANT_ARCHS if "bidirect" in a]  # others: test_variants.py
REFERENCE_ARCH = {False: "transformer", True: "transformer_vaswani_wmt_en_de_big"}


def test_architectures_are_registered():
    assert {"transformer_csan1d", "transformer_csan2d", "transformer_csan1d_big", "transformer_csan2d_big",
            "transformer_ctxaware", "transformer_ctxaware_big", "transformer_csan2d_ctxaware"} <= set(ARCHS)


@pytest.mark.parametrize("arch", VARIANT_ARCHS)
def test_papers_defaults_and_placement(arch):
    """The variant named by the architecture, in the lowest 3 of 6 encoder layers (as CSAN)."""
    model, args, _ = build_model(arch, TINY[:-4] + ["--encoder-layers", "6", "--decoder-layers", "1"])
    variant = args.encoder_self_attention
    assert arch in (f"transformer_{variant}", f"transformer_{variant}_big")
    assert args.csan_layers == 3
    if "csan" in arch:
        assert args.csan_window == 11
    if variant == "csan2d":
        assert args.csan_heads == 3
    kinds = [type(layer.self_attn) for layer in model.encoder.layers]
    assert kinds == [SELF_ATTENTION_VARIANTS[variant]] * 3 + [MultiheadAttention] * 3
    assert all(type(layer.self_attn) is MultiheadAttention for layer in model.decoder.layers)


@pytest.mark.parametrize("arch", PARAMETER_FREE_ARCHS)
def test_parameter_count_equals_transformer_at_full_size(arch):
    """Parameter-free: the exact count of the Transformer at the same (real) dimensions."""
    big = arch.endswith("_big")
    d = make_dictionary(1000)
    model, _, _ = build_model(arch, ["--share-all-embeddings"], dictionary=d, weightless=True)
    stock, _, _ = build_model(REFERENCE_ARCH[big], ["--share-all-embeddings"], dictionary=d, weightless=True)
    assert n_params(model) == n_params(stock)
    assert model.encoder.embed_tokens.embedding_dim == (1024 if big else 512)
    stock_names = [n for n, _ in stock.named_parameters() if n.rsplit(".", 1)[-1] not in _FUSED_PATH_COPIES]
    assert [n for n, _ in model.named_parameters()] == stock_names  # less fairseq 0.12.2's copies


@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_encoder_output_independent_of_padding(arch):
    """fairseq left-pads by default; left or right, real positions see the same outputs."""
    model, _, task = build_model(arch, TINY + small_window(arch))
    model.eval()
    pad = task.source_dictionary.pad()
    torch.manual_seed(1)
    sent = torch.randint(4, 50, (1, 7))
    alone = model.encoder(sent, torch.tensor([7]))["encoder_out"][0]  # (T, 1, C)
    for extra in (2, 6):
        left = torch.cat([torch.full((1, extra), pad), sent], dim=1)
        right = torch.cat([sent, torch.full((1, extra), pad)], dim=1)
        out_l = model.encoder(left, torch.tensor([7]))["encoder_out"][0]
        out_r = model.encoder(right, torch.tensor([7]))["encoder_out"][0]
        torch.testing.assert_close(out_l[extra:], alone, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out_r[:7], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_gradients_reach_every_parameter(arch):
    model, _, task = build_model(arch, TINY + ["--share-all-embeddings"])
    model.train()
    torch.manual_seed(0)
    src = torch.randint(4, 50, (3, 9))
    src[1, :4] = task.source_dictionary.pad()
    out, _ = model(src, torch.tensor([9, 5, 9]), torch.randint(4, 50, (3, 6)))
    out.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if ".self_attn." in name:
            assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        ("transformer_csan1d", ["--csan-window", "4"], "--csan-window must be a positive odd"),
        ("transformer_csan1d", ["--csan-window", "0"], "--csan-window must be a positive odd"),
        ("transformer_csan2d", ["--csan-window", "-1"], "--csan-window must be a positive odd"),
        ("transformer_csan2d", ["--csan-heads", "2"], "--csan-heads must be a positive odd"),
        ("transformer_csan2d", ["--csan-heads", "5"], r"--csan-heads must be at most .*--encoder-attention-heads 4"),
        ("transformer_csan2d", ["--csan-layers", "4"], r"--csan-layers must be an integer from 0 to .*--encoder-layers 3"),
        ("transformer_csan1d", ["--csan-layers", "-1"], "--csan-layers must be an integer from 0"),
        ("transformer_csan1d", ["--csan-heads", "3"], r"--csan-heads applies only to the csan2d variant .* uses 'csan1d'"),
    ],
)
def test_bad_settings_are_refused(arch, flags, message, capsys):
    assert_refused(arch, flags, message, capsys)


@pytest.mark.parametrize("arch,flags", [
    ("transformer_csan1d", ["--csan-window", "10"]), ("transformer_csan2d", ["--csan-heads", "2"]),
    ("transformer_csan2d", ["--csan-impl", "fast"]), ("transformer_csan1d", ["--csan-layers", "-1"]),
    ("transformer_ctxaware", ["--ctx-type", "foo"]), ("transformer_ctxaware", ["--ctx-side", "up"]),
    ("transformer_ctxaware", ["--ctx-gate", "value"]), ("transformer_relpos", ["--relpos-clip", "0"]),
    ("transformer_relpos", ["--relpos-tables", "x"]), ("transformer_local_hard", ["--local-window", "-2"]),
    ("transformer_local_soft", ["--locality-hidden", "0"]), ("transformer_block", ["--block-size", "0"]),
    ("transformer_cnn", ["--cnn-kernel", "4"]), ("transformer_cnn", ["--cnn-conv", "dilated"]),
])
def test_a_bad_flag_value_is_a_usage_error_when_parsed(arch, flags, capsys):
    """As argparse does for its own flags: the usage and one line naming the flag, before any work."""
    assert assert_refused(arch, flags, "must be|invalid choice", capsys) == "parse"


def test_csan_layers_zero_is_the_transformer():
    model, _, _ = build_model("transformer_csan2d", TINY + ["--csan-layers", "0"])
    stock, _, _ = build_model("transformer", TINY)
    model.load_state_dict(stock.state_dict())
    assert all(type(layer.self_attn) is MultiheadAttention for layer in model.encoder.layers)
    src = torch.randint(4, 50, (2, 6))
    prev = torch.randint(4, 50, (2, 5))
    model.eval(), stock.eval()
    torch.testing.assert_close(model(src, None, prev)[0], stock(src, None, prev)[0])


@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_checkpoint_round_trip(arch, tmp_path):
    """Saved as fairseq's Trainer.state_dict saves, loaded by fairseq's own loader, which
    calls torch.load with weights_only on torch >= 2.6."""
    model, args, task = build_model(arch, TINY + small_window(arch))
    model.eval()
    path = tmp_path / "checkpoint.pt"
    checkpoint_utils.torch_persistent_save(
        {"args": None, "model": model.state_dict(),
         "cfg": OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True),
         "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam", "lr_scheduler_state": {}, "num_updates": 0}], "extra_state": {}}, str(path),
    )
    # the file really holds an argparse.Namespace (cfg.model), the class torch >= 2.6 refuses
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(path)], task=task)
    loaded = models[0].eval()
    assert type(loaded) is type(model)
    torch.manual_seed(2)
    src = torch.randint(4, 50, (2, 8))
    src[0, :3] = task.source_dictionary.pad()
    prev = torch.randint(4, 50, (2, 5))
    torch.testing.assert_close(loaded(src, None, prev)[0], model(src, None, prev)[0], rtol=0, atol=0)



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_whole_model_in_half_precision_is_finite(arch, dtype):
    """Heavy left padding: some padding queries see only padding in their window."""
    skip_without_cpu_kernels(dtype)
    model, _, task = build_model(arch, TINY + small_window(arch))
    model = model.to(dtype).train()
    src = torch.randint(4, 50, (3, 12))
    src[1, :9] = task.source_dictionary.pad()
    src[2, :11] = task.source_dictionary.pad()
    out, _ = model(src, torch.tensor([12, 3, 1]), torch.randint(4, 50, (3, 5)))
    assert out.dtype == dtype and torch.isfinite(out).all()
    out.float().logsumexp(-1).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_csan_layers_on_a_model_without_a_variant_is_refused():
    with pytest.raises(ValueError, match=r"--csan-layers 2 needs a self-attention variant .* 'standard'"):
        build_model("transformer_ctxaware", ["--csan-layers", "2"])
    build_model("transformer_ctxaware", ["--csan-layers", "0"])  # 0 is what it means anyway
    model, args, _ = build_model("transformer_ctxaware", ["--csan-layers", "2", "--encoder-self-attention", "csan1d"])
    assert args.csan_layers == 2
