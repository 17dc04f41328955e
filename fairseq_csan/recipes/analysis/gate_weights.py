"""Gate weights of context-aware models (the context-aware paper's Figures 2-4): the average
gate values lambda_Q and lambda_K of eq. 5 per layer, on the source side and the target side,
and per part of speech of the source words.

docs/analysis.md, "Gate weights", says which data and checkpoints it takes, how the values are
averaged (per layer and side, and per POS tag of the source words with --pos) and what it plots.
"""

from collections import defaultdict
from pathlib import Path

from ..command_line import UNCHECKED
from ..runner import Refusal, as_command, check_made_from, say
from ..task import TASK
from .common import analysis_parser, figure, outputs, read_lines, write_table


def words_of(pieces):
    """Group BPE pieces (subword-nmt's "@@" continuation marks) into words: lists of piece positions."""
    words = [[]]
    for position, piece in enumerate(pieces):
        words[-1].append(position)
        if not piece.endswith("@@"):
            words.append([])
    return [word for word in words if word]


class GateTotals:
    """Running sums of gate values: per (side, layer), and per source POS tag."""

    def __init__(self):
        self.layer = defaultdict(lambda: [0.0, 0.0, 0])  # (side, layer) -> [sum q, sum k, tokens]
        self.pos = defaultdict(lambda: [0.0, 0.0, 0])  # tag -> [sum q, sum k, words x layers]

    def add_layers(self, records):
        for r in records:
            q, k = r.get("lambda_q"), r.get("lambda_k")
            ref = q if q is not None else k
            real = ~r["padding_mask"] if r["padding_mask"] is not None else ref.new_ones(ref.shape, dtype=bool)
            cell = self.layer[(r["side"], r["layer"])]
            cell[0] += float(q[real].double().sum()) if q is not None else float("nan")
            cell[1] += float(k[real].double().sum()) if k is not None else float("nan")
            cell[2] += int(real.sum())

    def add_pos(self, records, pieces_per_row, tags_per_row):
        """``pieces_per_row[b]``: the source BPE pieces of row b (no EOS) in order;
        ``tags_per_row[b]``: its word tags. Encoder records only."""
        for r in records:
            if r["side"] != "encoder":
                continue
            for b, (pieces, tags) in enumerate(zip(pieces_per_row, tags_per_row)):
                real = (~r["padding_mask"][b]).nonzero().flatten() if r["padding_mask"] is not None \
                    else range(r["lambda_q" if r.get("lambda_q") is not None else "lambda_k"].shape[1])
                positions = [int(p) for p in real][: len(pieces)]  # the EOS comes last
                for tag, word in zip(tags, words_of(pieces)):
                    cell = self.pos[tag]
                    for which, values in enumerate((r.get("lambda_q"), r.get("lambda_k"))):
                        cell[which] += (float(values[b, [positions[i] for i in word]].double().mean())
                                        if values is not None else float("nan"))
                    cell[2] += 1

    def layer_rows(self, name):
        return [[name, side, layer, q / n, k / n, n] for (side, layer), (q, k, n) in sorted(self.layer.items())]

    def pos_rows(self, name):
        return [[name, tag, q / n, k / n, n] for tag, (q, k, n) in sorted(self.pos.items(), key=lambda x: -x[1][2])]


def run_model(args, p: dict, name: str, checkpoint: Path) -> GateTotals:
    """The model's gate values, teacher-forced over --subset."""
    import torch

    from fairseq_csan import register

    register()  # (this command starts without fairseq)
    from fairseq import checkpoint_utils, utils

    from fairseq_csan import record_gates

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                       arg_overrides={"data": str(p["data"])})
    model = models[0].eval()
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        model.cuda()
    task.load_dataset(args.subset)
    dataset, pos_lines = task.dataset(args.subset), p["pos_lines"]
    if pos_lines is not None and len(pos_lines) != len(dataset):
        raise Refusal(f"--pos has {len(pos_lines)} lines, the {args.subset} set {len(dataset)} sentences")
    batches = task.get_batch_iterator(dataset=dataset, max_tokens=args.max_tokens, ignore_invalid_inputs=False,
                                      num_workers=0).next_epoch_itr(shuffle=False)
    totals, seen, src_dict = GateTotals(), 0, task.source_dictionary
    special = (src_dict.pad(), src_dict.eos())
    with torch.no_grad(), record_gates(model) as records:
        for sample in batches:
            if use_cuda:
                sample = utils.move_to_cuda(sample)
            records.clear()
            model(**sample["net_input"])
            if not records:
                raise Refusal(f"{name}: {checkpoint} has no context-aware gates (train a *_ctxaware model)")
            totals.add_layers(records)
            seen += len(sample["id"])
            if pos_lines is None:
                continue
            pieces, tags = [], []  # each sentence's source BPE pieces and POS tags, their numbers checked
            for b, sid in enumerate(sample["id"].tolist()):
                row = [int(t) for t in sample["net_input"]["src_tokens"][b] if int(t) not in special]
                # the BPE text, where there is one: an <unk> in the binarised data has lost its piece's "@@" mark
                tokens = p["bpe_lines"][sid].split() if p["bpe_lines"] is not None else [src_dict[t] for t in row]
                if len(tokens) != len(row):
                    raise Refusal(f"the BPE source line {sid + 1} has {len(tokens)} pieces, the binarised sentence "
                                  f"{len(row)}")
                pieces.append(tokens)
                tags.append(pos_lines[sid].split())
                if len(tags[-1]) != len(words_of(tokens)):
                    raise Refusal(f"--pos line {sid + 1}: {len(tags[-1])} tags for {len(words_of(tokens))} words")
            totals.add_pos(records, pieces, tags)
    say(f"{name}: {seen} sentences of {args.subset}")
    return totals


def plot_layers(rows, path):
    names = list(dict.fromkeys(r[0] for r in rows))
    with figure(path, 1, len(names), figsize=(3.6 * len(names), 3.2), sharey=True) as axes:
        for ax, name in zip(axes, names):
            for side, style in (("encoder", "-"), ("decoder", "--")):
                mine = [r for r in rows if r[0] == name and r[1] == side]
                if mine:
                    layers = [r[2] for r in mine]
                    ax.plot(layers, [r[3] for r in mine], style, marker="o", color="tab:blue", label=f"λQ {side}")
                    ax.plot(layers, [r[4] for r in mine], style, marker="s", color="tab:red", label=f"λK {side}")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("layer")
            ax.legend(fontsize=7)
        axes[0].set_ylabel("mean gate value")


def plot_pos(rows, path):
    names = list(dict.fromkeys(r[0] for r in rows))
    with figure(path, len(names), 1, figsize=(6, 3 * len(names))) as axes:
        for ax, name in zip(axes, names):
            mine = [r for r in rows if r[0] == name]
            xs = range(len(mine))
            ax.bar([x - 0.2 for x in xs], [r[2] for r in mine], 0.4, label="λQ", color="tab:blue")
            ax.bar([x + 0.2 for x in xs], [r[3] for r in mine], 0.4, label="λK", color="tab:red")
            total = sum(r[4] for r in mine)
            ax.axhline(sum(r[2] * r[4] for r in mine) / total, color="grey", linewidth=1, label="all words (λQ)")
            ax.set_xticks(list(xs))
            ax.set_xticklabels([r[1] for r in mine], rotation=45, fontsize=8)
            ax.set_title(name, fontsize=9)
            ax.legend(fontsize=7)


def plan(args) -> dict:
    """Everything the models will read, checked before any model is loaded; the outputs claimed."""
    data = args.data / "data-bin" if (args.data / "data-bin").is_dir() else args.data
    models = [(name, Path(path)) for name, sep, path in (spec.partition("=") for spec in args.model)]
    for spec, (name, path) in zip(args.model, models):
        if "=" not in spec or not path.is_file():
            raise Refusal(f"--model takes NAME=CHECKPOINT with an existing file, got '{spec}'")
    if not sorted(data.glob("dict.*.txt")):
        raise Refusal(f"--data {args.data}: no dict.*.txt there (give a prepared task folder or its data-bin/)")
    if not sorted(data.glob(f"{args.subset}.*.bin")):
        raise Refusal(f"--data {args.data}: no binarised '{args.subset}' subset there ({args.subset}.*.bin); --subset "
                      "takes test or valid here")
    if args.pos and not args.pos.is_file():
        raise Refusal(f"--pos {args.pos}: no such file")
    for _, checkpoint in models:  # made from this task's data, as its run's or evaluation's record says
        check_made_from(checkpoint, data, str(args.data), args.unchecked)
    # the source's BPE pieces, to group into words: the prepared task's bpe/ file
    settings = TASK.read(args.data) if args.pos else None
    bpe_file = args.data / "bpe" / f"{args.subset}.{settings['src']}" if settings else None
    bpe_lines = read_lines(bpe_file) if bpe_file and bpe_file.is_file() else None
    return dict(data=data, models=models, layers=outputs(args.out, "gate_weights", args.force), bpe_lines=bpe_lines,
                pos=outputs(args.out, "gate_weights_pos", args.force) if args.pos else None,
                pos_lines=read_lines(args.pos) if args.pos else None)


def run(args, p: dict) -> None:
    layer_rows, pos_rows = [], []
    for name, checkpoint in p["models"]:
        totals = run_model(args, p, name, checkpoint)
        layer_rows += totals.layer_rows(name)
        pos_rows += totals.pos_rows(name)
    write_table(p["layers"], ["model", "side", "layer", "mean λQ", "mean λK", "tokens"], layer_rows,
                f"Gate values of eq. 5 averaged over the real tokens of '{args.subset}'.")
    plot_layers(layer_rows, p["layers"][2])
    if p["pos"]:
        write_table(p["pos"], ["model", "tag", "mean λQ", "mean λK", "words x layers"], pos_rows,
                    "Word gate = mean over its BPE pieces; averaged over the encoder's gated layers.")
        plot_pos(pos_rows, p["pos"][2])


def main(argv=None):
    parser = analysis_parser("gate_weights", __doc__)
    parser.add_argument("--model", required=True, action="append", help="NAME=CHECKPOINT of a context-aware model")
    parser.add_argument("--data", required=True, type=Path, help="prepared task folder or data-bin")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--pos", type=Path, help="POS tags aligned with the subset's source, one per word")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument(UNCHECKED[0], action="store_true", help=UNCHECKED[1])
    args, _ = parser.read(argv)
    run(args, plan(args))


if __name__ == "__main__":
    as_command(main)
