"""Context-aware self-attention (Yang et al., AAAI 2019): the module against a loop reference
of eqs. 5-10, the model's wiring, incremental decoding and beam search, parameter counts,
gradients, gate recording and bad flags."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from conftest import TINY, build_model, make_dictionary
from reference import assert_refused, ctxaware_reference, n_params, skip_without_cpu_kernels
from fairseq_csan import record_gates
from fairseq_csan.modules import SelfAttention
from fairseq_csan.modules.context_gating import CONTEXT_GATES, CONTEXT_TYPES, ContextHistory, context_aware

D, H, L = 16, 4, 3


def make_stack(ctx_type, ctx_gate, causal, seed=0, dtype=torch.float64):
    """Layers 1..L of context-aware attention sharing one history, with random gate vectors."""
    torch.manual_seed(seed)
    history = ContextHistory(causal=causal)
    cls = context_aware(SelfAttention)
    stack = [cls(D, H, history=history, layer=l, ctx_type=ctx_type, ctx_gate=ctx_gate) for l in range(1, L + 1)]
    for m in stack:
        for p in (m.v_state, m.v_context):
            if p is not None:
                torch.nn.init.normal_(p, std=0.5)
        m.to(dtype).eval()
    return history, stack


def random_inputs(T=7, B=3, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(T, B, D, generator=g, dtype=dtype) for _ in range(L)]


def padding(kind, T=7, B=3):
    if kind == "none":
        return None
    pad = torch.zeros(B, T, dtype=torch.bool)
    if kind == "left":
        pad[1, :3], pad[2, :5] = True, True
    else:
        pad[1, 4:], pad[2, 2:] = True, True
    return pad


def run_stack(history, stack, inputs, pad, incremental_state=None):
    with history.recording(pad, incremental_state):
        return [m(x, x, x, key_padding_mask=pad, incremental_state=incremental_state,
                  attn_mask=_causal(x) if history.causal and incremental_state is None else None)[0]
                for m, x in zip(stack, inputs)]


def _causal(x):
    T = x.size(0)
    return torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1)


@pytest.mark.parametrize("ctx_gate", CONTEXT_GATES)
@pytest.mark.parametrize("ctx_type", CONTEXT_TYPES)
@pytest.mark.parametrize("side,pad_kind", [("encoder", "none"), ("encoder", "left"), ("encoder", "right"),
                                           ("decoder", "none"), ("decoder", "right")])
def test_matches_loop_reference(ctx_type, ctx_gate, side, pad_kind):
    causal = side == "decoder"
    history, stack = make_stack(ctx_type, ctx_gate, causal)
    inputs, pad = random_inputs(), padding(pad_kind)
    fast = run_stack(history, stack, inputs, pad)
    slow = ctxaware_reference(stack, inputs, pad, causal)
    real = torch.ones(3, 7, dtype=torch.bool) if pad is None else ~pad
    for f, s in zip(fast, slow):
        torch.testing.assert_close(f.transpose(0, 1)[real], s.transpose(0, 1)[real], rtol=1e-9, atol=1e-9)


def test_context_changes_the_output():
    """Guards the reference test against a context that is silently ignored."""
    history, stack = make_stack("deep-global+deep", "both", causal=False)
    inputs = random_inputs()
    base = run_stack(history, stack, inputs, None)
    changed = [inputs[0] + 1.0] + inputs[1:]  # layer 1's input enters layers 2 and 3 only as context
    after = run_stack(history, stack, changed, None)
    assert not torch.allclose(after[2], base[2])


def test_layer_one_of_deep_context_is_standard():
    history, stack = make_stack("deep", "both", causal=False)
    stock = SelfAttention(D, H).to(torch.float64).eval()
    assert stack[0].gated == () and dict(stack[0].named_parameters()).keys() == dict(stock.named_parameters()).keys()
    stock.load_state_dict(stack[0].state_dict())
    x = random_inputs()[0]
    torch.testing.assert_close(run_stack(history, stack[:1], [x], None)[0], stock(x)[0])


def test_module_outside_its_encoder_fails_clearly():
    _, stack = make_stack("global", "both", causal=False)
    x = random_inputs()[0]
    with pytest.raises(RuntimeError, match="inside a context-aware encoder or decoder"):
        stack[0](x)


@pytest.mark.parametrize("ctx_type", CONTEXT_TYPES)
def test_incremental_module_equals_full_pass(ctx_type):
    history, stack = make_stack(ctx_type, "both", causal=True)
    inputs = random_inputs()
    full = run_stack(history, stack, inputs, None)
    state = {}
    for t in range(7):
        step = run_stack(history, stack, [x[t:t + 1] for x in inputs], None, incremental_state=state)
        for f, s in zip(full, step):
            torch.testing.assert_close(s[0], f[t], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_is_finite_and_close(dtype):
    skip_without_cpu_kernels(dtype)
    history, stack = make_stack("deep-global+deep", "both", causal=False, dtype=torch.float32)
    inputs, pad = random_inputs(dtype=torch.float32), padding("left")
    full = run_stack(history, stack, inputs, pad)
    for m in stack:
        m.to(dtype)
    low = run_stack(history, stack, [x.to(dtype) for x in inputs], pad)
    real = ~pad
    for f, lo in zip(full, low):
        assert lo.dtype == dtype and torch.isfinite(lo).all()
        torch.testing.assert_close(lo.float().transpose(0, 1)[real], f.transpose(0, 1)[real], rtol=0.05, atol=0.05)


# ---- the whole model ---------------------------------------------------------------------


def test_encoder_gives_each_layer_the_inputs_of_the_layers_below():
    """Model level: what the encoder feeds its context is its layers' real inputs."""
    model, _, task = build_model("transformer_ctxaware", TINY)
    model.eval()
    layer_inputs, attn_outputs = [], []
    hooks = []
    for layer in model.encoder.layers:
        hooks.append(layer.register_forward_pre_hook(lambda mod, args: layer_inputs.append(args[0])))
        hooks.append(layer.self_attn.register_forward_hook(lambda mod, args, out: attn_outputs.append(out[0])))
    src = torch.randint(4, 50, (2, 6))
    src[0, :2] = task.source_dictionary.pad()
    model.encoder(src, torch.tensor([4, 6]))
    for h in hooks:
        h.remove()
    modules = [layer.self_attn for layer in model.encoder.layers]
    pad = src.eq(task.source_dictionary.pad())
    expected = ctxaware_reference(modules, layer_inputs, pad, causal=False)
    for got, want in zip(attn_outputs, expected):
        torch.testing.assert_close(got.transpose(0, 1)[~pad], want.transpose(0, 1)[~pad], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("side", ["decoder", "both"])
def test_beam_search_scores_equal_teacher_forced_scores(side):
    """Incremental decoding with beam reordering gives the scores of the full forward pass."""
    d = make_dictionary(40)
    model, _, task = build_model("transformer_ctxaware", TINY + ["--ctx-side", side], dictionary=d)
    with torch.no_grad():  # make the gates matter
        for name, p in model.named_parameters():
            if name.endswith(("v_state", "v_context")):
                p.normal_(std=0.5)
    model.eval()
    torch.manual_seed(3)
    src = torch.randint(4, 40, (3, 6))
    src[1, :2] = d.pad()
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1)}}
    gen = SequenceGenerator([model], d, beam_size=4, max_len_a=0, max_len_b=8, normalize_scores=False)
    hypos = gen.forward(sample)
    checked = 0
    for b, beam in enumerate(hypos):
        for hyp in beam:
            tokens = hyp["tokens"][None]  # ends with eos
            prev = torch.cat([torch.tensor([[d.eos()]]), tokens[:, :-1]], dim=1)
            with torch.no_grad():
                logits, _ = model(src[b:b + 1], sample["net_input"]["src_lengths"][b:b + 1], prev)
            lprobs = torch.log_softmax(logits.float(), -1)[0].gather(-1, tokens[0, :, None])[:, 0]
            torch.testing.assert_close(hyp["positional_scores"], lprobs, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == 12


def test_decoder_context_is_causal():
    model, _, _ = build_model("transformer_ctxaware", TINY + ["--ctx-side", "decoder"])
    model.eval()
    src = torch.randint(4, 50, (1, 6))
    prev = torch.randint(4, 50, (1, 7))
    out = model(src, None, prev)[0]
    changed = prev.clone()
    changed[0, 5:] = 4
    out2 = model(src, None, changed)[0]
    torch.testing.assert_close(out2[:, :5], out[:, :5])
    assert not torch.allclose(out2[:, 5:], out[:, 5:])


def test_gates_can_be_recorded_and_cost_nothing_otherwise():
    model, _, task = build_model("transformer_ctxaware", TINY + ["--ctx-side", "both"])
    model.eval()
    src = torch.randint(4, 50, (2, 6))
    src[0, :2] = task.source_dictionary.pad()
    prev = torch.randint(4, 50, (2, 5))
    with record_gates(model) as gates:
        model(src, None, prev)
    assert [(g["side"], g["layer"]) for g in gates] == [("encoder", l) for l in (1, 2, 3)] + [("decoder", 1), ("decoder", 2)]
    for g in gates:
        T = 6 if g["side"] == "encoder" else 5
        for key in ("lambda_q", "lambda_k"):
            assert g[key].shape == (2, T) and ((g[key] > 0) & (g[key] < 1)).all()
        assert torch.allclose(g["lambda_q"], torch.full_like(g["lambda_q"], 0.5))  # v starts at zero
    assert gates[0]["padding_mask"].tolist() == src.eq(task.source_dictionary.pad()).tolist()
    model(src, None, prev)
    assert len(gates) == 5  # nothing recorded outside the block
    assert all(m.gate_sink is None for m in model.modules() if hasattr(m, "gate_sink"))


@pytest.mark.parametrize("ctx_gate,keys", [("query", ["lambda_q"]), ("key", ["lambda_k"])])
def test_one_gate_gates_only_its_projection(ctx_gate, keys):
    model, _, _ = build_model("transformer_ctxaware", TINY + ["--ctx-gate", ctx_gate])
    with record_gates(model) as gates:
        model(torch.randint(4, 50, (2, 6)), None, torch.randint(4, 50, (2, 5)))
    assert all(sorted(k for k in g if k.startswith("lambda")) == keys for g in gates)


# ---- parameter counts: DESIGN.md section 3 closed form, beside the paper's Tables 1-2 -------


def gate_params(model):
    return sum(p.numel() for n, p in model.named_parameters() if n.endswith(("v_state", "v_context")))


@pytest.fixture(scope="module")
def vocab():
    return make_dictionary(1000)


@pytest.mark.parametrize(
    "flags,units,paper_m",
    [
        (["--ctx-type", "global"], 6, 3.15),
        (["--ctx-type", "deep"], 15, 7.86),
        (["--ctx-type", "deep-global"], 21, 11.01),
        ([], 36, 18.87),
        (["--ctx-side", "both"], 72, 37.7),
        (["--ctx-gate", "query"], 18, None),
        (["--ctx-gate", "key", "--ctx-type", "global"], 3, None),
    ],
)
def test_parameter_increase_at_base(vocab, flags, units, paper_m):
    """Increase over ``transformer`` = units * 2 d^2 (d = 512) plus the gate vectors."""
    base, _, _ = build_model("transformer", ["--share-all-embeddings"], dictionary=vocab, weightless=True)
    model, _, _ = build_model("transformer_ctxaware", ["--share-all-embeddings", *flags], dictionary=vocab, weightless=True)
    increase = n_params(model) - n_params(base)
    assert increase - gate_params(model) == units * 2 * 512 ** 2
    assert gate_params(model) == 2 * 512 * sum(len(m.gated) for m in model.modules() if hasattr(m, "gated"))
    if paper_m is not None:  # DESIGN.md's figures, which leave out the gate vectors
        assert round((increase - gate_params(model)) / 1e6, 2 if paper_m < 20 else 1) == paper_m


@pytest.mark.slow
def test_parameter_increase_at_big(vocab):
    base, _, _ = build_model("transformer_vaswani_wmt_en_de_big", ["--share-all-embeddings"], dictionary=vocab, weightless=True)
    base_n = n_params(base)
    del base
    model, _, _ = build_model("transformer_ctxaware_big", ["--share-all-embeddings"], dictionary=vocab, weightless=True)
    increase = n_params(model) - base_n
    assert increase - gate_params(model) == 36 * 2 * 1024 ** 2
    assert round((increase - gate_params(model)) / 1e6, 1) == 75.5


def test_combination_has_both_mechanisms():
    model, args, _ = build_model("transformer_csan2d_ctxaware", TINY + ["--encoder-layers", "4"])
    names = [type(layer.self_attn).__name__ for layer in model.encoder.layers]
    assert names == ["ContextAwareCrossHeadWindowAttention"] * 3 + ["ContextAwareSelfAttention"]
    assert (args.csan_window, args.csan_heads, args.ctx_type) == (11, 3, "deep-global+deep")
    ctx_only, _, _ = build_model("transformer_ctxaware", TINY + ["--encoder-layers", "4"])
    assert n_params(model) == n_params(ctx_only)


def test_gradients_reach_u_and_v():
    model, _, _ = build_model("transformer_ctxaware", TINY + ["--ctx-side", "both"])
    model.train()
    out, _ = model(torch.randint(4, 50, (3, 7)), None, torch.randint(4, 50, (3, 5)))
    out.logsumexp(-1).sum().backward()
    new = [(n, p) for n, p in model.named_parameters() if any(k in n for k in ("u_mean", "u_state", "v_state", "v_context"))]
    assert {n.split(".")[-1] if "v_" in n else n.split(".")[-2] for n, _ in new} == {"u_mean", "u_state", "v_state", "v_context"}
    for name, p in new:
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        ("transformer_ctxaware", ["--ctx-type", "local"], "--ctx-type must be one of global, deep, deep-global, deep-global\\+deep; got 'local'"),
        ("transformer_ctxaware", ["--ctx-side", "middle"], "--ctx-side must be one of encoder, decoder, both; got 'middle'"),
        ("transformer_ctxaware", ["--ctx-gate", "value"], "--ctx-gate must be one of query, key, both; got 'value'"),
        ("transformer", ["--ctx-side", "decoder"], None),
        ("transformer_csan2d", ["--ctx-gate", "key"], "--ctx-gate needs context gating: set --ctx-type"),
        ("transformer_ctxaware", ["--checkpoint-activations"], "--checkpoint-activations cannot be used with --ctx-type"),
        ("transformer_ctxaware", ["--ctx-side", "both", "--cross-self-attention"], "--ctx-side decoder/both needs"),
    ],
)
def test_bad_settings_are_refused(arch, flags, message, capsys):
    if message is None:  # the stock model does not know the flag at all
        with pytest.raises(SystemExit):
            build_model(arch, TINY + flags)
        return
    assert_refused(arch, flags, message, capsys)
