"""fairseq_csan/__main__.py: python -m fairseq_csan user-dir | variant ARCH [--device] | help TOOL, from any
folder (help: tests/test_cli_help.py)."""

from pathlib import Path

import pytest
import torch

from conftest import REPO
from recipe_helpers import python_m


def test_user_dir_and_variant_from_any_folder(tmp_path):
    done = python_m("user-dir", cwd=tmp_path)
    assert done.returncode == 0 and Path(done.stdout.strip()) == REPO / "fairseq_csan"
    seen = "cuda" if torch.cuda.is_available() else "cpu"
    assert python_m("variant", "transformer_csan2d", "--device", cwd=tmp_path).stdout.strip() == f"csan2d {seen}"


@pytest.mark.parametrize("arch, printed", [("transformer_csan2d", "csan2d"), ("transformer_relpos_big", "relpos"),
                                           ("transformer_ctxaware", "standard"), ("transformer", "none")])
def test_variant_names_the_encoder_self_attention(arch, printed, capsys):
    from fairseq_csan.__main__ import main

    main(["variant", arch])
    assert capsys.readouterr().out == f"{printed}\n"
    main(["variant", arch, "--device"])
    assert capsys.readouterr().out == f"{printed} {'cuda' if torch.cuda.is_available() else 'cpu'}\n"


def test_an_unknown_architecture_is_refused_naming_ours():
    from fairseq_csan.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["variant", "transformer_csan3d", "--device"])
    assert "unknown architecture 'transformer_csan3d'" in str(stop.value.code)
    assert "transformer_csan2d" in str(stop.value.code)


def test_a_name_of_no_list_is_looked_up_in_fairseq_s_registry_ours_registered(tmp_path):
    """This command starts without fairseq; a name that arch_names does not list makes it register
    our architectures (fairseq_csan.register()) and ask fairseq's registry."""
    done = python_m("variant", "transformer_csan3d", cwd=tmp_path)
    assert done.returncode != 0 and "unknown architecture 'transformer_csan3d'; ours: " in done.stderr
    assert "transformer_csan2d" in done.stderr.split("ours: ")[1]
    assert python_m("variant", "lstm", cwd=tmp_path).stdout.strip() == "none"  # fairseq's own, by its registry
