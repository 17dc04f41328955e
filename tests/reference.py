"""Slow, obviously correct references written straight from the papers' equations.

Loops over batch, head, query and key; no masks, no fused kernels. Only for tests.
"""

import math

import torch


def csan_attention_reference(module, x, key_padding_mask, window, area_heads):
    """Yang et al. 2019 (arXiv:1810.13320) eqs. 6-8 with the projections of eq. 1.

    e_ij^{hs} = q_i^h . k_j^s / sqrt(d_h) over s in h-n..h+n (heads that exist) and
    j in i-m..i+m (positions in the sentence that are not padding), one softmax over that
    area, y_i^h = sum alpha_ij^{hs} v_j^s; then the output projection. ``area_heads`` = 1 is
    1D-CSAN (eqs. 4-5), and a window as long as the sentence is the standard attention.
    Rows of padding queries are left at zero: only real positions are defined.
    """
    T, B, d = x.shape
    H = module.num_heads
    dh = d // H
    m, n = (window - 1) // 2, (area_heads - 1) // 2
    q = module.q_proj(x).view(T, B, H, dh)
    k = module.k_proj(x).view(T, B, H, dh)
    v = module.v_proj(x).view(T, B, H, dh)
    pad = key_padding_mask if key_padding_mask is not None else torch.zeros(B, T, dtype=torch.bool)
    y = torch.zeros(T, B, H, dh, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                if pad[b, i]:
                    continue
                energies, values = [], []
                for s in range(h - n, h + n + 1):
                    if not 0 <= s < H:
                        continue  # heads outside 1..H are absent (masked, not wrapped)
                    for j in range(i - m, i + m + 1):
                        if not 0 <= j < T or pad[b, j]:
                            continue  # clipped at the sentence edges; padding never attended
                        energies.append(torch.dot(q[i, b, h], k[j, b, s]) / math.sqrt(dh))
                        values.append(v[j, b, s])
                alpha = torch.softmax(torch.stack(energies), dim=0)
                y[i, b, h] = sum(a * val for a, val in zip(alpha, values))
    return module.out_proj(y.reshape(T, B, d))


def ctxaware_reference(modules, inputs, key_padding_mask, causal):
    """Yang et al., "Context-Aware Self-Attention Networks", AAAI 2019, eqs. 5-10, token by token.

    ``modules`` are the context-aware self-attentions of layers 1..L and ``inputs`` their
    inputs H^1..H^L, each (T, B, d). For each sentence, layer l and real position i:
    the means of eq. 8 (over all real tokens, or over real tokens 1..i when ``causal``),
    C_i assembled by eqs. 8-10, C_i U from the full U = [U_mean; U_state], the gates of
    eq. 6, Q^ and K^ of eq. 5, then one softmax per head over the real keys (j <= i when
    causal) and the output projection. Returns the outputs of every layer; rows of
    padding queries are left at zero.
    """
    T, B, d = inputs[0].shape
    pad = key_padding_mask if key_padding_mask is not None else torch.zeros(B, T, dtype=torch.bool)
    outputs = []
    for module, x in zip(modules, inputs):
        H, dh = module.num_heads, module.head_dim
        q_all, k_all, v_all = module.q_proj(x), module.k_proj(x), module.v_proj(x)  # eq. 1, (T, B, d)
        weights = [u.weight for u in (module.u_mean, module.u_state) if u is not None]
        U_t = torch.cat(weights, dim=1) if weights else None  # (n_gated * d, d_c), i.e. U transposed
        y = torch.zeros(T, B, d, dtype=x.dtype)
        for b in range(B):
            real = [t for t in range(T) if not pad[b, t]]
            qh, kh = {}, {}
            for i in real:
                q, k = q_all[i, b], k_all[i, b]
                if U_t is not None:
                    seen = [t for t in real if t <= i] if causal else real
                    parts = [sum(inputs[j - 1][t, b] for t in seen) / len(seen) for j in module.mean_layers]  # eq. 8
                    parts += [inputs[j - 1][i, b] for j in module.state_layers]  # eq. 9
                    c = torch.cat(parts)  # eq. 10 and the concatenation of both kinds
                    cu = (U_t @ c).split(d)
                    for g, name in enumerate(module.gated):
                        h = q if name == "q" else k
                        lam = torch.sigmoid(h @ module.v_state[g] + cu[g] @ module.v_context[g])  # eq. 6
                        h = (1 - lam) * h + lam * cu[g]  # eq. 5
                        if name == "q":
                            q = h
                        else:
                            k = h
                qh[i], kh[i] = q.view(H, dh), k.view(H, dh)
            for i in real:
                keys = [j for j in real if j <= i] if causal else real
                heads = []
                for h in range(H):
                    e = torch.stack([qh[i][h] @ kh[j][h] for j in keys]) / math.sqrt(dh)
                    alpha = torch.softmax(e, dim=0)
                    heads.append(sum(a * v_all[j, b].view(H, dh)[h] for a, j in zip(alpha, keys)))
                y[i, b] = torch.cat(heads)
        outputs.append(module.out_proj(y))
    return outputs


# ---- the locality baselines (CSAN paper, Table 1) -----------------------------------------------
# Each takes (module, x (T, B, d), key_padding_mask (B, T) or None) and returns (T, B, d) with
# the rows of padding queries left at zero. Sentences are taken out of the padding first, so
# "position" means the index within the sentence.


def _sentences(x, key_padding_mask):
    T, B, _ = x.shape
    pad = key_padding_mask if key_padding_mask is not None else torch.zeros(B, T, dtype=torch.bool)
    return [[t for t in range(T) if not pad[b, t]] for b in range(B)]


def _heads(module, x):
    T, B, d = x.shape
    H = module.num_heads
    split = lambda t: t.view(T, B, H, d // H)  # noqa: E731
    return split(module.q_proj(x)), split(module.k_proj(x)), split(module.v_proj(x))


def _softmax_sum(energies, values):
    alpha = torch.softmax(torch.stack(energies), dim=0)
    return sum(a * v for a, v in zip(alpha, values))


def _masked_heads(module, x, key_padding_mask, allowed):
    """Multi-head attention where ``allowed(h, i, j)`` (positions within the sentence) says
    which keys query i of head h sees; returns the heads' outputs before W_O."""
    T, B, d = x.shape
    H, dh = module.num_heads, d // module.num_heads
    q, k, v = _heads(module, x)
    y = torch.zeros(T, B, H, dh, dtype=x.dtype)
    for b, slots in enumerate(_sentences(x, key_padding_mask)):
        for h in range(H):
            for i, si in enumerate(slots):
                keys = [(j, sj) for j, sj in enumerate(slots) if allowed(h, i, j)]
                y[si, b, h] = _softmax_sum([q[si, b, h] @ k[sj, b, h] / math.sqrt(dh) for _, sj in keys],
                                           [v[sj, b, h] for _, sj in keys])
    return y.reshape(T, B, d)


def standard_reference(module, x, key_padding_mask):
    """Eqs. 1-3 of the CSAN paper: every head over every real key."""
    return module.out_proj(_masked_heads(module, x, key_padding_mask, lambda h, i, j: True))


def bidirect_reference(module, x, key_padding_mask):
    """DiSAN's forward mask (keys j <= i) on heads 1..ceil(H/2), backward (j >= i) on the rest,
    the diagonal kept."""
    forward = (module.num_heads + 1) // 2
    allowed = lambda h, i, j: j <= i if h < forward else j >= i  # noqa: E731
    return module.out_proj(_masked_heads(module, x, key_padding_mask, allowed))


def relpos_reference(module, x, key_padding_mask):
    """Shaw et al. 2018 eqs. 3-4 and section 3.2: e_ij = q_i . (k_j + w^K_clip(j-i)) / sqrt(d_h),
    z_i = sum_j alpha_ij (v_j + w^V_clip(j-i)), with head h's table (or the shared one)."""
    T, B, d = x.shape
    H, dh, kmax = module.num_heads, d // module.num_heads, module.clip
    q, k, v = _heads(module, x)
    y = torch.zeros(T, B, H, dh, dtype=x.dtype)
    for b, slots in enumerate(_sentences(x, key_padding_mask)):
        for h in range(H):
            for i, si in enumerate(slots):
                r = [max(-kmax, min(kmax, j - i)) + kmax for j in range(len(slots))]
                table = h if module.tables == "per-head" else 0
                w_k, w_v = module.rel_keys[table], module.rel_values[table]
                y[si, b, h] = _softmax_sum(
                    [q[si, b, h] @ (k[sj, b, h] + w_k[r[j]]) / math.sqrt(dh) for j, sj in enumerate(slots)],
                    [v[sj, b, h] + w_v[r[j]] for j, sj in enumerate(slots)],
                )
    return module.out_proj(y.reshape(T, B, d))


def gaussian_reference(module, x, key_padding_mask):
    """Yang et al. 2018, section 3: softmax(energy + G), G_ij = -(j - P_i)^2 / (2 (D_i / 2)^2),
    [P_i; D_i] = I sigmoid(U^T tanh(W_p Q_i)); P_i = i for NEIGHBOR, D_i = D for LOCAL_HARD."""
    T, B, d = x.shape
    H, dh = module.num_heads, d // module.num_heads
    q, k, v = _heads(module, x)
    y = torch.zeros(T, B, H, dh, dtype=x.dtype)
    for b, slots in enumerate(_sentences(x, key_padding_mask)):
        I = len(slots)
        for i, si in enumerate(slots):
            Q_i = q[si, b].reshape(d)
            s = iter(torch.sigmoid(module.scalars.weight @ torch.tanh(module.predictor.weight @ Q_i)) * I)
            P = next(s) if module.predicts_centre else float(i)
            D = next(s) if module.predicts_width else module.window
            G = [-((j - P) ** 2) / (2 * (D / 2) ** 2) for j in range(I)]
            for h in range(H):
                y[si, b, h] = _softmax_sum(
                    [q[si, b, h] @ k[sj, b, h] / math.sqrt(dh) + G[j] for j, sj in enumerate(slots)],
                    [v[sj, b, h] for sj in slots],
                )
    return module.out_proj(y.reshape(T, B, d))


def block_reference(module, x, key_padding_mask):
    """Bi-BloSAN (Shen et al. 2018b) as written in block_attention.py's docstring, block by block."""
    T, B, d = x.shape
    r = module.block_size
    forward = (module.num_heads + 1) // 2
    same_block = lambda h, i, j: i // r == j // r and (j <= i if h < forward else j >= i)  # noqa: E731
    h_all = _masked_heads(module, x, key_padding_mask, same_block)  # intra-block SAN, (T, B, d)
    y = torch.zeros(T, B, d, dtype=x.dtype)
    for b, slots in enumerate(_sentences(x, key_padding_mask)):
        blocks = [slots[s:s + r] for s in range(0, len(slots), r)]
        summaries = []
        for block in blocks:  # multi-dimensional source2token: one softmax per feature
            hb = torch.stack([h_all[t, b] for t in block])  # (n_b, d)
            scores = module.summary_score(torch.nn.functional.elu(module.summary_hidden(hb)))
            summaries.append((torch.softmax(scores, dim=0) * hb).sum(0))
        v = torch.stack(summaries)[:, None, :]  # (n, 1, d)
        o = bidirect_reference(module.inter_block, v, None)[:, 0]  # inter-block SAN
        v = v[:, 0]
        g = torch.sigmoid(module.block_gate(torch.cat([o, v], -1)))
        e = g * o + (1 - g) * v
        for i, t in enumerate(slots):
            both = torch.cat([x[t, b], h_all[t, b], e[i // r]])
            f = torch.sigmoid(module.fusion_gate(both))
            y[t, b] = f * torch.nn.functional.elu(module.fusion_value(both)) + (1 - f) * x[t, b]
    return module.out_proj(y)


def cnn_reference(module, x, key_padding_mask):
    """QANet (Yu et al. 2018): x^c = x^{c-1} + relu(conv_c(LN(x^{c-1}))) with zeros beyond the
    sentence, then self-attention over x^C; returned as SAN(x^C) + x^C - x (the layer adds x)."""
    T, B, d = x.shape
    w = module.kernel
    out = torch.zeros(T, B, d, dtype=x.dtype)
    for b, slots in enumerate(_sentences(x, key_padding_mask)):
        h = x[slots, b]  # (I, d)
        for sub in module.convolutions:
            z = sub.norm(h)
            conv = []
            for i in range(len(slots)):
                acc = torch.zeros(d, dtype=x.dtype)
                for o in range(w):
                    j = i + o - w // 2
                    if 0 <= j < len(slots):
                        if module.conv_kind == "separable":
                            acc = acc + sub.conv[0].weight[:, 0, o] * z[j]  # depthwise
                        else:
                            acc = acc + sub.conv.weight[:, :, o] @ z[j]
                if module.conv_kind == "separable":
                    acc = sub.conv[1].weight[:, :, 0] @ acc + sub.conv[1].bias
                else:
                    acc = acc + sub.conv.bias
                conv.append(acc)
            h = h + torch.relu(torch.stack(conv))
        san = standard_reference(module, h[:, None, :], None)[:, 0]
        out[slots, b] = san + h - x[slots, b]
    return out


def csan_reference(module, x, key_padding_mask):
    return csan_attention_reference(module, x, key_padding_mask, module.window, getattr(module, "area_heads", 1))


# every registered variant has its reference here (tests fail for a variant without one)
REFERENCES = {
    "standard": standard_reference,
    "csan1d": csan_reference,
    "csan2d": csan_reference,
    "bidirect": bidirect_reference,
    "relpos": relpos_reference,
    "neighbor": gaussian_reference,
    "local_hard": gaussian_reference,
    "local_soft": gaussian_reference,
    "block": block_reference,
    "cnn": cnn_reference,
}


# ---- what the running torch can compute on the CPU -------------------------------------------
def skip_without_cpu_kernels(dtype):
    """Skip the calling test, saying why, where this torch lacks CPU kernels in ``dtype`` that a
    model needs (matmul, layer norm, softmax, dropout): torch 1.13 has none for float16."""
    import pytest
    import torch.nn.functional as F

    x = torch.ones(2, 2, dtype=dtype)
    try:
        F.linear(x, x, x[0]), F.layer_norm(x, (2,)), torch.softmax(x, -1), F.dropout(x, 0.5, training=True)
    except RuntimeError as error:
        pytest.skip(f"torch {torch.__version__} has no {dtype} CPU kernels ({str(error).splitlines()[0]})")


# ---- refusals of bad settings ---------------------------------------------------------------------
def assert_refused(arch, flags, message, capsys) -> str:
    """``flags`` on ``arch`` are refused with ``message``. A bad value of one flag is refused
    when the command line is parsed (argparse's usage error, its last line naming the flag), and
    again at model build when the same value comes past the parser (a checkpoint's or a script's
    args); a bad combination is refused at build. Returns where: "parse" or "build"."""
    import re

    import pytest
    from fairseq.tasks.translation import TranslationTask

    from conftest import TINY, build_model, make_dictionary, parse_model_args

    try:
        parse_model_args(arch, TINY + flags)
    except SystemExit as stop:
        assert stop.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"error: argument {flags[0]}" in last, last
        assert re.search(message, last) or f"invalid choice: {flags[1]!r}" in last, last
        args = parse_model_args(arch, TINY)
        value = flags[1]
        for convert in (int, float):
            try:
                value = convert(flags[1])
                break
            except ValueError:
                pass
        setattr(args, flags[0][2:].replace("-", "_"), value)
        d = make_dictionary()
        with pytest.raises(ValueError, match=message):
            TranslationTask(args, d, d).build_model(args)
        return "parse"
    with pytest.raises(ValueError, match=message):
        build_model(arch, TINY + flags)
    return "build"


def n_params(model) -> int:
    """The model's parameter count, as a paper reports it: without the copies of the encoder
    layers' weights that fairseq 0.12.2 registers as parameters for its fused inference path
    (fairseq_csan/models/variant_transformer.py, ``_FUSED_PATH_COPIES``). Our layers hold none;
    fairseq's own Transformer, the reference of these counts, does under 0.12.2."""
    from fairseq_csan.models.variant_transformer import _FUSED_PATH_COPIES

    return sum(p.numel() for name, p in model.named_parameters()
               if not (".layers." in name and name.rsplit(".", 1)[-1] in _FUSED_PATH_COPIES))
