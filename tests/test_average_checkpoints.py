"""fairseq_csan/recipes/average_checkpoints.py: the average of real fairseq checkpoints of our models,
loaded back by fairseq's own loader; the choice of the newest checkpoints; refusals."""

import pytest
import torch
from omegaconf import OmegaConf
from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from conftest import TINY, build_model
from fairseq_csan.recipes import average_checkpoints
from fairseq_csan.recipes.runner import Refusal, write_file


def save(path, model, args, updates):
    checkpoint_utils.torch_persistent_save(
        {"args": None, "model": model.state_dict(),
         "cfg": OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True),
         "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                                "lr_scheduler_state": {}, "num_updates": updates}],
         "last_optimizer_state": {"state": {}}, "extra_state": {"train_iterator": {"epoch": 1}}},
        str(path),
    )


@pytest.fixture
def checkpoints(tmp_path):
    """Three checkpoints of one architecture with different weights, named as fairseq names them."""
    models, paths = [], []
    for i, updates in enumerate((100, 200, 300)):
        model, args, task = build_model("transformer_relpos", TINY, seed=i)
        path = tmp_path / f"checkpoint_{1 + i // 2}_{updates}.pt"
        save(path, model, args, updates)
        models.append(model)
        paths.append(path)
    save(tmp_path / "checkpoint_last.pt", models[-1], args, 300)
    return models, paths, task


def test_average_equals_the_mean_and_loads_in_fairseq(checkpoints, tmp_path):
    models, paths, task = checkpoints
    out = tmp_path / "avg" / "average.pt"
    average_checkpoints.main(["--inputs", *map(str, paths), "--output", str(out)])
    loaded, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(out)], task=task)
    averaged = dict(loaded[0].named_parameters())
    for name, p in models[0].named_parameters():
        mean = sum(dict(m.named_parameters())[name] for m in models) / 3
        torch.testing.assert_close(averaged[name], mean, rtol=1e-6, atol=1e-7)
        assert averaged[name].dtype == p.dtype
    state = torch.load(out, map_location="cpu")
    assert "last_optimizer_state" not in state
    assert state["optimizer_history"][-1]["num_updates"] == 300  # the newest one's training state
    assert state["extra_state"]["averaged_from"] == [str(p) for p in paths]


def test_last_n_takes_the_newest_update_checkpoints(checkpoints, tmp_path):
    _, paths, _ = checkpoints
    out = tmp_path / "last2.pt"
    average_checkpoints.main(["--dir", str(tmp_path), "--last", "2", "--output", str(out)])
    assert torch.load(out, map_location="cpu")["extra_state"]["averaged_from"] == [str(p) for p in paths[1:]]


def test_list_prints_the_choice_without_writing(checkpoints, tmp_path, capsys):
    _, paths, _ = checkpoints
    average_checkpoints.main(["--dir", str(tmp_path), "--last", "2", "--list"])
    assert capsys.readouterr().out.splitlines() == [str(p) for p in paths[1:]]
    assert not list(tmp_path.glob("*avg*")) and len(list(tmp_path.glob("*.pt"))) == 4
    with pytest.raises(Refusal):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "2"])  # neither --output nor --list


def test_epoch_checkpoints_when_there_are_no_update_checkpoints(tmp_path):
    for name in ("checkpoint2.pt", "checkpoint10.pt", "checkpoint9.pt", "checkpoint_best.pt"):
        (tmp_path / name).write_bytes(b"")
    chosen = average_checkpoints.newest_checkpoints(tmp_path, 2)
    assert [p.name for p in chosen] == ["checkpoint9.pt", "checkpoint10.pt"]


def test_refusals(checkpoints, tmp_path):
    models, paths, _ = checkpoints
    out = tmp_path / "average.pt"
    out.write_bytes(b"keep me")  # a file of the user's: never replaced, --force or not
    for force in ([], ["--force"]):
        with pytest.raises(Refusal, match="average_checkpoints did not write it"):
            average_checkpoints.main(["--inputs", str(paths[0]), "--output", str(out), *force])
    assert out.read_bytes() == b"keep me"
    out.unlink()
    average_checkpoints.main(["--inputs", str(paths[0]), "--output", str(out)])
    first = out.read_bytes()
    with pytest.raises(Refusal, match=r"exists \(an earlier output of average_checkpoints\): pass --force"):
        average_checkpoints.main(["--inputs", str(paths[1]), "--output", str(out)])
    average_checkpoints.main(["--inputs", str(paths[1]), "--output", str(out), "--force"])
    assert out.read_bytes() != first
    assert not list(tmp_path.glob(".average.pt*"))  # no temporary left (its record: the folder's .written.json)
    with pytest.raises(Refusal, match="missing checkpoint .*nowhere.pt"):
        average_checkpoints.main(["--inputs", str(paths[0]), str(tmp_path / "nowhere.pt"), "--output", str(tmp_path / "x.pt")])
    with pytest.raises(Refusal, match="--last 5 needs 5 numbered checkpoints .* found 3"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "5", "--output", str(tmp_path / "y.pt")])
    other, args, _ = build_model("transformer_csan2d", TINY)
    save(tmp_path / "other.pt", other, args, 1)
    with pytest.raises(Refusal, match="other.pt is not of the same run as .*arch transformer_relpos vs transformer_csan2d"):
        average_checkpoints.main(["--inputs", str(paths[0]), str(tmp_path / "other.pt"), "--output", str(tmp_path / "z.pt")])
    with pytest.raises(Refusal, match="--output .*checkpoint_1_100.pt is input 1 .*checkpoint_1_100.pt"):
        average_checkpoints.main(["--inputs", str(paths[0]), str(paths[1]), "--output", str(paths[0]), "--force"])
    assert len(list(tmp_path.glob("*.pt"))) == 6 and not (tmp_path / "z.pt").exists()


def test_a_checkpoint_of_another_run_is_refused_by_its_contents(checkpoints, tmp_path):
    """Averaging reads what it averages: the update count, the model settings and seed, and the
    tensor shapes come from each checkpoint, not its name."""
    _, paths, _ = checkpoints
    # another run's checkpoint renamed into the folder: its contents say update 7, not 400
    model, args, _ = build_model("transformer_relpos", TINY, seed=5)
    save(tmp_path / "checkpoint_2_400.pt", model, args, 7)
    with pytest.raises(Refusal, match="checkpoint_2_400.pt holds a checkpoint of update 7, not 400"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(tmp_path / "a.pt")])
    (tmp_path / "checkpoint_2_400.pt").unlink()
    # the same update count, but another seed
    model, args, _ = build_model("transformer_relpos", [*TINY, "--seed", "9"])
    save(tmp_path / "checkpoint_2_400.pt", model, args, 400)
    with pytest.raises(Refusal, match="checkpoint_2_400.pt is not of the same run .*seed 1 vs 9"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(tmp_path / "a.pt")])
    # the same run extended with a larger --max-update (and another learning rate): still one run
    model, args, _ = build_model("transformer_relpos", [*TINY, "--max-update", "900", "--lr", "0.5"], seed=5)
    save(tmp_path / "checkpoint_2_400.pt", model, args, 400)
    average_checkpoints.main(["--dir", str(tmp_path), "--last", "2", "--output", str(tmp_path / "a.pt")])
    (tmp_path / "a.pt").unlink()
    # another model setting is another model
    model, args, _ = build_model("transformer_relpos", [*TINY, "--dropout", "0.3"], seed=5)
    save(tmp_path / "checkpoint_2_400.pt", model, args, 400)
    with pytest.raises(Refusal, match="checkpoint_2_400.pt is not of the same run .*dropout 0.1 vs 0.3"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(tmp_path / "a.pt")])
    # the same checkpoint twice
    with pytest.raises(Refusal, match="are the same update \\(300\\)"):
        average_checkpoints.main(["--inputs", str(paths[2]), str(tmp_path / "checkpoint_last.pt"),
                                  "--output", str(tmp_path / "a.pt")])
    # another dictionary: the embedding tables differ in size
    from conftest import make_dictionary

    model, args, _ = build_model("transformer_relpos", TINY, dictionary=make_dictionary(60))
    save(tmp_path / "checkpoint_2_400.pt", model, args, 400)
    with pytest.raises(Refusal, match="checkpoint_2_400.pt is not of the same model .*embed_tokens.weight is "
                                         "\\(64, 32\\), not \\(54, 32\\)"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(tmp_path / "a.pt")])
    assert not (tmp_path / "a.pt").exists()


def test_a_damaged_checkpoint_is_named(checkpoints, tmp_path):
    _, paths, _ = checkpoints
    damaged = tmp_path / "checkpoint_1_400.pt"
    damaged.write_bytes(paths[-1].read_bytes()[:5000])  # a copy killed midway
    with pytest.raises(Refusal, match=f"cannot read {damaged} \\(damaged or not a checkpoint"):
        average_checkpoints.average([*paths[:2], damaged])


def test_every_option_changes_the_average_or_is_refused(checkpoints, tmp_path, capsys):
    """No option of the averaging is accepted and ignored: each changes what is averaged, what
    is printed or where it goes (or whether an existing file is replaced), or is refused with
    one line."""
    import itertools

    from recipe_helpers import refusal_of, walk_options

    _, paths, _ = checkpoints
    runs = itertools.count()

    def plan(extra):
        out = tmp_path / "walk" / f"{next(runs)}.pt"
        if "--force" in extra:  # what --force is for: an --output of its own that is there already
            out.parent.mkdir(exist_ok=True)
            write_file(out, b"older", "average_checkpoints")
        argv = ["--dir", tmp_path, "--last", "2", "--output", out, *extra]
        if "--output" in extra or "--list" in extra:
            argv = argv[:4] + argv[6:]
        if "--inputs" in extra:  # the other way to name what is averaged
            argv = argv[4:]
        target = extra[extra.index("--output") + 1] if "--output" in extra else out
        existed = target.exists()
        refused = refusal_of(average_checkpoints.main, argv, capsys)
        written = torch.load(target, map_location="cpu")["extra_state"]["averaged_from"] if refused is None \
            and target.exists() else None
        return repr((str(target).replace(str(out), "OUT"), existed, written, capsys.readouterr().out)), refused

    walk_options(plan, [["--last", "3"], ["--inputs", *paths[:2]], ["--dir", tmp_path / "walk"],
                        ["--output", tmp_path / "elsewhere.pt"], ["--force"], ["--list"], ["--list", "--force"]])


def test_checkpoints_saved_before_a_flag_existed_average_with_those_after(tmp_path):
    """A run resumed with a newer plugin: its earlier checkpoints lack a flag the later ones
    have. At the variant's declared default the flag is the model the earlier ones were, and
    they average; at another value they are another model, and are refused naming it."""
    import torch as _torch

    model, args, _ = build_model("transformer_relpos", TINY, seed=1)
    for updates in (100, 200, 300):
        save(tmp_path / f"checkpoint_1_{updates}.pt", model, args, updates)
    for updates in (100, 200):  # saved before --relpos-tables existed
        path = tmp_path / f"checkpoint_1_{updates}.pt"
        state = _torch.load(path, weights_only=False)
        model_settings = state["cfg"]["model"]  # (an argparse Namespace, as fairseq keeps it)
        assert model_settings.relpos_tables == "per-head"  # the declared default
        delattr(model_settings, "relpos_tables")
        _torch.save(state, path)
    out = tmp_path / "averaged.pt"
    average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(out)])
    assert out.is_file()
    out.unlink()
    newest = _torch.load(tmp_path / "checkpoint_1_300.pt", weights_only=False)
    newest["cfg"]["model"].relpos_tables = "shared"
    _torch.save(newest, tmp_path / "checkpoint_1_300.pt")
    with pytest.raises(Refusal, match="is not of the same run .*relpos_tables (None vs shared|shared vs None)"):
        average_checkpoints.main(["--dir", str(tmp_path), "--last", "3", "--output", str(out)])
    assert not out.exists()
