"""Every registered self-attention variant, parametrised over the registry: the fast code
against its loop reference (no, left and right padding), padding invariance, gradients to
every parameter, half precision; and the locality baselines' flags and parameter counts.

A new variant is tested by registering it and adding its reference to reference.py."""

import pytest
import torch

from conftest import TINY, build_model, make_dictionary
from fairseq_csan.modules import SELF_ATTENTION_VARIANTS
from reference import REFERENCES, assert_refused, n_params, skip_without_cpu_kernels

D, H = 32, 4
# constructor options that make each mechanism bite on sentences of 9 tokens
OPTIONS = {
    "csan1d": dict(window=5),
    "csan2d": dict(window=5, area_heads=3),
    "relpos": dict(clip=3),
    "local_hard": dict(window=3.0),
    "block": dict(block_size=3),
    "cnn": dict(conv_layers=2, kernel=3),
}
CASES = [(name, OPTIONS.get(name, {})) for name in sorted(SELF_ATTENTION_VARIANTS)] + [
    ("relpos", dict(clip=2, tables="shared")),
    ("neighbor", dict(hidden=16)),
    ("block", dict(block_size=1)),
    ("block", dict(block_size=20)),  # one block longer than the sentence
    ("cnn", dict(conv_layers=1, kernel=5, conv="full")),
]
CASE_IDS = [f"{n}-" + "-".join(f"{k}{v}" for k, v in o.items()) for n, o in CASES]


def make(name, options, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    module = SELF_ATTENTION_VARIANTS[name](D, H, **options)
    with torch.no_grad():  # so that no bias is zero and every term shows in the comparison
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module.to(dtype).eval()


def padded(lengths, T, side, seed=1, dtype=torch.float64):
    torch.manual_seed(seed)
    x = torch.randn(T, len(lengths), D, dtype=dtype)
    pad = torch.ones(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        real = slice(T - n, T) if side == "left" else slice(0, n)
        pad[b, real] = False
    return x.masked_fill(pad.t()[:, :, None], 0.0), pad


def test_every_variant_has_a_reference():
    assert set(REFERENCES) == set(SELF_ATTENTION_VARIANTS)


@pytest.mark.parametrize("side", ["none", "left", "right"])
@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_matches_loop_reference(name, options, side):
    module = make(name, options)
    x, pad = padded([9, 4, 6] if side != "none" else [9, 9, 9], 9, "left" if side == "none" else side)
    kpm = None if side == "none" else pad
    out, _ = module(x, x, x, key_padding_mask=kpm)
    ref = REFERENCES[name](module, x, kpm)
    real = ~pad.t()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[real], ref[real], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_padding_does_not_change_real_outputs(name, options):
    module = make(name, options)
    torch.manual_seed(3)
    sentence = torch.randn(7, 1, D, dtype=torch.float64)
    alone, _ = module(sentence, sentence, sentence)
    for extra in (1, 5):
        zeros = torch.zeros(extra, 1, D, dtype=torch.float64)
        for x, real in ((torch.cat([zeros, sentence]), slice(extra, None)), (torch.cat([sentence, zeros]), slice(0, 7))):
            pad = torch.zeros(1, 7 + extra, dtype=torch.bool)
            pad[0, [i for i in range(7 + extra) if i not in range(7 + extra)[real]]] = True
            out, _ = module(x, x, x, key_padding_mask=pad)
            torch.testing.assert_close(out[real], alone, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,options", CASES[:len(SELF_ATTENTION_VARIANTS)], ids=CASE_IDS[:len(SELF_ATTENTION_VARIANTS)])
def test_gradients_reach_every_parameter(name, options):
    """(Not for blocks of 1 token or one block per sentence, where some products are constant.)"""
    module = make(name, options, dtype=torch.float32).train()
    x, pad = padded([9, 4, 6], 9, "left", dtype=torch.float32)
    x.requires_grad_(True)
    out, _ = module(x, x, x, key_padding_mask=pad)
    (out[~pad.t()] ** 2).sum().backward()
    for pname, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,options", CASES, ids=CASE_IDS)
def test_half_precision_close_to_float32(name, options, dtype):
    """Heavy padding (a sentence of one token) and a batch of several lengths."""
    skip_without_cpu_kernels(dtype)
    module = make(name, options, dtype=torch.float32)
    x, pad = padded([9, 1, 5], 9, "left", dtype=torch.float32)
    full, _ = module(x, x, x, key_padding_mask=pad)
    xh = x.to(dtype)
    half, _ = module.to(dtype)(xh, xh, xh, key_padding_mask=pad)
    assert torch.isfinite(half).all()
    real = ~pad.t()
    torch.testing.assert_close(half[real].float(), full[real], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("name", ["neighbor", "local_hard", "local_soft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("side", ["left", "right"])
def test_gaussian_bias_stays_finite_for_extreme_predictions(name, dtype, side, monkeypatch):
    """Widths of 0 or nearly 0 and centres on the token, at the sentence's edge or far outside
    it: the bias itself is finite in the model's precision and <= 0 (so no kernel can turn it
    into inf or NaN), and so are the outputs."""
    skip_without_cpu_kernels(dtype)
    module = make(name, OPTIONS.get(name, {}), dtype=dtype)
    x, pad = padded([9, 2], 9, side, dtype=dtype)
    q = module.q_proj(x).view(9, 2, H, D // H).permute(1, 2, 0, 3)
    cases = [(0.0, 0.0), (4.0, 1e-30), (-1e6, 1e-3), (1e6, 1e6), ("own", 1e-3), ("own", 0.0), (1.999, 1e-3)]
    for centre, width in cases:
        def fake(q, positions, lengths, centre=centre, width=width):
            c = positions.float() if centre == "own" else torch.full(positions.shape, centre)
            return c, torch.full(positions.shape, width)
        monkeypatch.setattr(module, "centre_and_width", fake)
        bias = module.score_bias(q, pad).to(dtype)
        assert torch.isfinite(bias).all() and (bias <= 0).all(), (centre, width)
        out, _ = module(x, x, x, key_padding_mask=pad)
        assert torch.isfinite(out).all(), (centre, width)


def test_bidirect_splits_the_heads_and_keeps_the_diagonal():
    mask = SELF_ATTENTION_VARIANTS["bidirect"](36, 3).structure_mask(4, "cpu")  # heads 1, 2 forward; 3 backward
    past = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    assert torch.equal(mask[0], past) and torch.equal(mask[1], past) and torch.equal(mask[2], past.t())


# ---- the locality baselines as models --------------------------------------------------------
BASELINES = ["bidirect", "relpos", "neighbor", "local_hard", "local_soft", "block", "cnn"]


def _closed_form_increase(name, d=512, heads=8, layers=3):
    """New parameters over the Transformer, from each module's equations (README table)."""
    per_layer = {
        "bidirect": 0,
        "relpos": 2 * (2 * 16 + 1) * d,  # w^K, w^V for distances -16..16, d_h wide, one per head
        "neighbor": d * d + d,  # W_p, U_d
        "local_hard": d * d + d,  # W_p, U_p
        "local_soft": d * d + 2 * d,  # W_p, U_p, U_d
        # source2token 2 (d^2 + d), inter-block SAN 4 (d^2 + d), block gate 2 d^2 + d, fusion 2 (3 d^2 + d)
        "block": 14 * d * d + 9 * d,
        "cnn": 4 * (2 * d + 7 * d + d * d + d),  # 4 x (layer norm, depthwise 7 x d, pointwise d^2 + d)
    }[name]
    return layers * per_layer


@pytest.mark.parametrize("name", BASELINES)
def test_parameter_increase_at_base_dimensions(name):
    d = make_dictionary(1000)
    model, _, _ = build_model(f"transformer_{name}", ["--share-all-embeddings"], dictionary=d, weightless=True)
    stock, _, _ = build_model("transformer", ["--share-all-embeddings"], dictionary=d, weightless=True)
    increase = n_params(model) - n_params(stock)
    assert increase == _closed_form_increase(name)


def test_relpos_takes_shaws_settings_at_each_size():
    _, base, _ = build_model("transformer_relpos", TINY)
    _, big, _ = build_model("transformer_relpos_big", TINY)
    assert (base.relpos_clip, base.relpos_tables) == (16, "per-head")
    assert (big.relpos_clip, big.relpos_tables) == (8, "shared")


@pytest.mark.parametrize("variant", ["relpos", "local_hard", "block", "cnn", "csan2d"])
def test_a_variant_chosen_by_flag_gets_its_defaults(variant):
    """--encoder-self-attention on another architecture: the variant's own settings, in the
    lowest 3 layers, as with its named architecture."""
    _, named, _ = build_model(f"transformer_{variant}", TINY)
    model, args, _ = build_model("transformer_ctxaware", TINY + ["--encoder-self-attention", variant, "--ctx-side", "decoder"])
    for flag in ("csan_layers", "csan_window", "csan_heads", "relpos_clip", "relpos_tables", "local_window",
                 "block_size", "cnn_layers", "cnn_kernel", "cnn_conv"):
        assert getattr(args, flag, None) == getattr(named, flag, None), flag
    assert type(model.encoder.layers[2].self_attn) is SELF_ATTENTION_VARIANTS[variant]


def test_big_twins_are_registered():
    from fairseq.models import ARCH_MODEL_REGISTRY

    for name in BASELINES:
        assert ARCH_MODEL_REGISTRY[f"transformer_{name}_big"].__name__ == "VariantTransformerModel"


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        ("transformer_relpos", ["--relpos-clip", "0"], r"--relpos-clip must be a positive integer"),
        ("transformer_relpos", ["--relpos-tables", "per-layer"], r"--relpos-tables must be one of per-head, shared; got 'per-layer'"),
        ("transformer_local_hard", ["--local-window", "0"], r"--local-window must be a positive number"),
        ("transformer_local_hard", ["--local-window", "-2.5"], r"--local-window must be a positive number"),
        ("transformer_local_soft", ["--locality-hidden", "0"], r"--locality-hidden must be a positive integer"),
        ("transformer_block", ["--block-size", "0"], r"--block-size must be a positive integer"),
        ("transformer_cnn", ["--cnn-layers", "0"], r"--cnn-layers must be a positive integer"),
        ("transformer_cnn", ["--cnn-kernel", "4"], r"--cnn-kernel must be a positive odd integer"),
        ("transformer_cnn", ["--cnn-conv", "dilated"], r"--cnn-conv must be one of separable, full; got 'dilated'"),
        ("transformer_bidirect", ["--csan-layers", "4"], r"--csan-layers must be an integer from 0 to .*--encoder-layers 3"),
        # a flag the model's variant would ignore
        ("transformer_relpos", ["--csan-window", "5"], r"--csan-window applies only to the csan1d / csan2d variant"),
        ("transformer_neighbor", ["--local-window", "5"], r"--local-window applies only to the local_hard variant"),
        ("transformer_csan2d", ["--block-size", "2"], r"--block-size applies only to the block variant .* 'csan2d'"),
        ("transformer_cnn", ["--locality-hidden", "8"], r"--locality-hidden applies only to the neighbor / local_hard / local_soft"),
        # context gating around a variant that changes the whole layer
        ("transformer_block", ["--ctx-type", "global"], r"--ctx-type on the encoder cannot be combined with the 'block'"),
        ("transformer_cnn", ["--ctx-type", "deep"], r"--ctx-type on the encoder cannot be combined with the 'cnn'"),
    ],
)
def test_bad_settings_are_refused(arch, flags, message, capsys):
    assert_refused(arch, flags, message, capsys)


@pytest.mark.parametrize("name", BASELINES)
def test_variant_layers_flag_moves_the_baseline(name):
    model, _, _ = build_model(f"transformer_{name}", TINY + ["--csan-layers", "1"])
    kinds = [type(layer.self_attn).__name__ for layer in model.encoder.layers]
    assert kinds == [SELF_ATTENTION_VARIANTS[name].__name__, "MultiheadAttention", "MultiheadAttention"]


def test_one_rule_says_which_architectures_are_big():
    """arch_names.is_big, used wherever the package asks (variant defaults, the recipe's
    hyper-parameters, loading and averaging checkpoints), agrees with what each registered
    Transformer architecture, ours and fairseq's, sets: 1024-dim and 16 heads for the big ones."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
    from fairseq_csan.arch_names import is_big

    checked = 0
    for arch, model in ARCH_MODEL_REGISTRY.items():
        if model.__name__ not in ("TransformerModel", "VariantTransformerModel") or not arch.startswith("transformer"):
            continue
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        assert is_big(arch) == (args.encoder_embed_dim == 1024 and args.encoder_attention_heads == 16), arch
        checked += 1
    assert checked > 20 and is_big("transformer_csan2d_big") and not is_big("transformer_csan2d")


def test_the_names_known_without_fairseq_are_the_registered_ones():
    """arch_names (what the training command checks --arch against before it imports fairseq)
    lists exactly the architectures the plugin registers, with the variant each sets, and
    fairseq's Transformer names that it lists are registered in this fairseq."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from fairseq_csan.__main__ import registered_variant
    from fairseq_csan.arch_names import ARCHITECTURES, FAIRSEQ_TRANSFORMERS, variant_of

    ours = sorted(a for a, model in ARCH_MODEL_NAME_REGISTRY.items() if model == "transformer_variant")
    assert ours == sorted(ARCHITECTURES) and len(set(ARCHITECTURES)) == len(ARCHITECTURES) == 22
    assert {ARCH_MODEL_NAME_REGISTRY.get(a) for a in FAIRSEQ_TRANSFORMERS} == {"transformer"}
    for arch in (*ARCHITECTURES, *FAIRSEQ_TRANSFORMERS):  # the variant by name, as the registry sets it
        assert variant_of(arch) == registered_variant(arch), arch
    assert variant_of("lstm") is None and variant_of("transformer_csan3d") is None


def test_each_setting_is_declared_once_and_everything_else_comes_from_it():
    """A variant's setting is one registry.Option: the flag (and nothing else adds variant
    flags), its help naming the declared defaults, the default for base and big models, the
    constructor keyword with the same default, and whether checkpoints keep it."""
    import argparse
    import inspect

    from fairseq_csan.modules.registry import add_self_attention_args, declared_options, model_defining_flags

    parser = argparse.ArgumentParser()
    add_self_attention_args(parser)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    declared = set()
    for name, cls in SELF_ATTENTION_VARIANTS.items():
        assert not [c for c in cls.__mro__ if {"add_args", "defaults", "big_defaults"} & set(vars(c))], name
        options = declared_options(cls)
        for option in options:
            declared.add(option.dest)
            assert actions[option.dest].option_strings == [option.flag]
            owner = next(c for c in cls.__mro__ if option.keyword in inspect.signature(c.__init__).parameters)
            assert inspect.signature(owner.__init__).parameters[option.keyword].default == option.default, option
        assert set(model_defining_flags(cls)) == {o.dest for o in options if not o.same_result}
        assert cls.options(argparse.Namespace()) == {o.keyword: None for o in options}
    assert set(actions) == declared
    assert "16 base, 8 big" in actions["relpos_clip"].help and "per-head base, shared big" in actions["relpos_tables"].help
