"""attention_core's eq. 2 for torch < 2.0 (no F.scaled_dot_product_attention) equals the fused kernel."""

import pytest
import torch
import torch.nn.functional as F

from fairseq_csan.modules import attention_core
from fairseq_csan.modules.banded_attention import banded_attention


@pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="torch < 2.0: no fused kernel to compare with")
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
def test_matmul_attention_equals_the_fused_kernel(mask_kind):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 8, dtype=torch.float64) for _ in range(3))
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(2, 4, 7, 7) > 0.3
        mask[..., 0] = True  # every query attends somewhere
    elif mask_kind == "float":
        mask = torch.randn(2, 4, 7, 7, dtype=torch.float64)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = attention_core._attention_by_matmul(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_banded_attention_runs_on_the_matmul_path():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 40, 8, dtype=torch.float64) for _ in range(3))
    want = banded_attention(q, k, v, half_window=2, half_heads=1)
    got = banded_attention(q, k, v, half_window=2, half_heads=1, attend=attention_core._attention_by_matmul)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
