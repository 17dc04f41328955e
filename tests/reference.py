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
