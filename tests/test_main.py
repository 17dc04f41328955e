"""fairseq_csan/__main__.py: python -m fairseq_csan user-dir | variant ARCH, from any folder."""

from pathlib import Path

from conftest import REPO
from recipe_helpers import python_m


def test_user_dir_and_variant_from_any_folder(tmp_path):
    done = python_m("user-dir", cwd=tmp_path)
    assert done.returncode == 0 and Path(done.stdout.strip()) == REPO / "fairseq_csan"
    assert python_m("variant", "transformer_csan2d", cwd=tmp_path).stdout.strip() == "csan2d"
    assert python_m("variant", "transformer_relpos_big", cwd=tmp_path).stdout.strip() == "relpos"
    assert python_m("variant", "transformer_ctxaware", cwd=tmp_path).stdout.strip() == "standard"
    assert python_m("variant", "transformer", cwd=tmp_path).stdout.strip() == "none"
    bad = python_m("variant", "transformer_csan3d", cwd=tmp_path)
    assert bad.returncode != 0 and "unknown architecture 'transformer_csan3d'" in bad.stderr
    assert "transformer_csan2d" in bad.stderr
