"""A reloaded model computes what the built model computes, in eval mode, with and without
padding, for every architecture family.

fairseq 0.12.2 and GitHub main switch an encoder layer whose state dict was loaded (as
fairseq-generate and the hub interface load checkpoints) to torch's fused encoder-layer kernel
in eval mode, which knows nothing of our attention (VariantEncoderLayer's docstring). Loading
goes through fairseq's own path here (the model's load_state_dict with its upgrade step), so
under those fairseq versions this test fails without our guard; under fairseq-fixed it checks
that reloading changes nothing.
"""

import pytest
import torch

from conftest import TINY, build_model

FAMILIES = ["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware", "transformer_csan2d_ctxaware",
            "transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
            "transformer_local_soft", "transformer_block", "transformer_cnn"]


def batch(padded: bool):
    torch.manual_seed(3)
    tokens = torch.randint(4, 50, (3, 9))
    lengths = torch.tensor([9, 9, 9])
    if padded:
        lengths = torch.tensor([9, 6, 4])
        for row, n in enumerate(lengths.tolist()):
            tokens[row, :9 - n] = 1  # fairseq pads sources on the left
    prev = torch.randint(4, 50, (3, 7))
    return tokens, lengths, prev


@pytest.mark.parametrize("arch", FAMILIES)
def test_reloaded_model_equals_built_model_in_eval(arch, tmp_path):
    flags = TINY if arch == "transformer_ctxaware" else [*TINY, "--csan-layers", "2"]
    built, _, _ = build_model(arch, flags)
    torch.save({"model": built.state_dict()}, tmp_path / "checkpoint.pt")
    reloaded, _, _ = build_model(arch, flags, seed=99)
    state = torch.load(tmp_path / "checkpoint.pt", map_location="cpu")["model"]
    reloaded.load_state_dict(state, strict=True, model_cfg=None)
    built.eval()
    reloaded.eval()
    for padded in (False, True):
        tokens, lengths, prev = batch(padded)
        with torch.no_grad():
            want = built.encoder(tokens, lengths)
            got = reloaded.encoder(tokens, lengths)
            torch.testing.assert_close(got["encoder_out"][0], want["encoder_out"][0], rtol=0, atol=1e-6)
            want_out, _ = built(tokens, lengths, prev)
            got_out, _ = reloaded(tokens, lengths, prev)
            torch.testing.assert_close(got_out, want_out, rtol=0, atol=1e-5)
