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
