"""What the benchmark measures (python -m fairseq_csan.recipes.benchmark, benchmark.py, is the
command and says how): the models, their batches, the rounds side by side, and the tables."""

import ctypes
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import register

register()  # the plugin's architectures (the command has checked its options without fairseq)
from fairseq import options  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.sequence_generator import SequenceGenerator  # noqa: E402
from fairseq.tasks.translation import TranslationTask  # noqa: E402

from fairseq_csan.modules import SELF_ATTENTION_VARIANTS  # noqa: E402
from fairseq_csan.modules.local_window_attention import BANDED_FROM  # noqa: E402

from . import decoding  # noqa: E402
from .benchmark import LENGTH_SAMPLE, MALLOC_TUNING, MODULE, PRECISION_TEXT, architectures  # noqa: E402
from .runner import Failed, Refusal, say, shell_words, write_file  # noqa: E402

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def run(args, tuned):
    """The measurements of --mode, as tables headed by what was measured and where, printed (and written to --out)."""
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    args.dtype = PRECISIONS[args.precision]
    dictionary = Dictionary()
    for i in range(args.vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    intro, sections = (sentences if args.mode in ("train", "decode") else long_inputs)(args, dictionary)
    command = "Command: python -m fairseq_csan.recipes.benchmark " + shell_words(sys.argv[1:])
    table = "\n".join([intro, machine(args, tuned), "", *markdown(sections), "", command])
    print(table)
    if args.out:
        write_file(args.out, table + "\n", "benchmark")


def build(arch, dictionary, args, *extra):
    """``arch`` with ``extra`` and --model-flags, on --device in --precision; in eval mode for --mode decode."""
    parser = options.get_training_parser()
    cfg = options.parse_args_and_arch(
        parser, ["/dev/null", "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch,
                 "--share-all-embeddings", *extra, *args.model_flags])
    task = TranslationTask(cfg, dictionary, dictionary)
    torch.manual_seed(0)
    return task.build_model(cfg).to(device=args.device, dtype=args.dtype).train(args.mode != "decode")


def length_pairs(prefix, max_len: int):
    """(source, target) lengths in tokens with the end of sentence: the word counts of the pair of
    files ``prefix``.en/.de, or of the shipped newstest2014 sample when ``prefix`` is None."""
    if prefix is None:
        words = [map(int, row.split("\t")) for row in LENGTH_SAMPLE.read_text(encoding="utf-8").splitlines()
                 if row and not row.startswith("#")]
    else:
        src, tgt = (Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de"))
        words = [(len(s.split()), len(t.split())) for s, t in zip(src, tgt)]
    return [(s + 1, t + 1) for s, t in words if 0 < s < max_len and 0 < t < max_len]  # + </s>


def make_batches(pairs, args, vocab):
    """--warmup + --rounds fairseq-style batches drawn at random: the pairs sorted by length and cut at
    --max-tokens (padded) tokens each in --mode train, or into --batch-size sentences each (the short
    last one left out) in --mode decode, whose batches have no targets."""
    train, cut = args.mode == "train", [[]]
    for pair in sorted(pairs):
        full = (max(max(p) for p in cut[-1] + [pair]) * (len(cut[-1]) + 1) > args.max_tokens if train
                else len(cut[-1]) == args.batch_size)
        if cut[-1] and full:
            cut.append([])
        cut[-1].append(pair)
    if not train and len(cut[-1]) < args.batch_size:
        cut.pop()
    chosen = random.Random(args.seed).sample(cut, min(args.warmup + args.rounds, len(cut)))
    gen = torch.Generator().manual_seed(args.seed)
    return [tensors(batch, vocab, gen, args.device, train) for batch in chosen]


def tensors(batch, vocab, gen, device, targets=True):
    """A batch of (source, target) lengths as (src, src_lengths, prev, tgt) of random ids on ``device``, without
    ``targets`` (src, src_lengths); pad 1 (sources left-padded as in fairseq), </s> 2."""
    B, S, T = len(batch), max(p[0] for p in batch), max(p[1] for p in batch)
    src, prev, tgt = (torch.full((B, n), 1, dtype=torch.long) for n in (S, T, T))
    for b, (s, t) in enumerate(batch):
        src[b, S - s:] = torch.randint(4, vocab, (s,), generator=gen)
        src[b, -1] = 2  # </s>
        if targets:
            tgt[b, :t] = torch.randint(4, vocab, (t,), generator=gen)
            tgt[b, t - 1] = 2
            prev[b, 0] = 2
            prev[b, 1:t] = tgt[b, : t - 1]
    return tuple(t.to(device) for t in (src, torch.tensor([p[0] for p in batch]), prev, tgt)[:4 if targets else 2])


def cpu_name():
    try:
        return re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).strip()
    except (OSError, AttributeError):  # no /proc/cpuinfo, or no model name in it
        return platform.processor() or platform.machine()


def synchronizer(device):
    """What waits for a device's queued work: torch.cuda.synchronize on a GPU; nothing on the CPU."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def timed(step, sync):
    """Seconds one call of ``step`` takes, ``sync`` (synchronizer) called before and after."""
    sync()
    start = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - start


def meets_shapes_untimed(device) -> bool:
    """Whether --mode train/decode runs each model once, untimed, on a round's batch before timing it: on a
    GPU, which pays once for each new tensor shape (docs/speed.md), as training does once per shape."""
    return torch.device(device).type == "cuda"


def machine(args, tuned):
    """The line of a table that says where it was measured, in which precision."""
    versions = f"torch {torch.__version__}, Python {platform.python_version()}"
    if args.device == "cuda":
        where = (f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, TF32 matmul "
                 f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}), host {cpu_name()}, {versions}, "
                 "torch.cuda.synchronize() around each timed call")
    else:
        where = (f"{cpu_name()}, {os.cpu_count()} cores, {args.threads} thread{'s' if args.threads != 1 else ''}, "
                 f"{versions}, malloc tuning {'on' if tuned else 'off'}")
    return f"Machine: {where}. Precision: {PRECISION_TEXT[args.precision]}."


def train_step(model, batch):
    src, src_lengths, prev, tgt = batch
    logits, _ = model(src, src_lengths, prev)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), tgt.view(-1), ignore_index=1, reduction="sum")
    loss.backward()
    model.zero_grad(set_to_none=True)


def decode_step(model, batch, dictionary, beam):
    src, src_lengths = batch
    steps = int(src_lengths.max())
    SequenceGenerator([model], dictionary, beam_size=beam, len_penalty=decoding.LENPEN, max_len_a=0, max_len_b=steps,
                      min_len=steps).forward({"net_input": {"src_tokens": src, "src_lengths": src_lengths}})


def encoder_step(model, batch):
    model.encoder(batch[0], src_lengths=batch[1])["encoder_out"][0].float().sum().backward()
    model.zero_grad(set_to_none=True)


def side_by_side(step, models, batches, warmup, device, untimed_first=False, report=lambda r, seconds: None):
    """Seconds per call of ``step(model, batch)`` of each model in each round after the first ``warmup``, one
    batch a round, in rounds of A B C C B A (the benchmark's docstring); ``untimed_first``: each model runs
    the round's batch once before; ``report(round, its seconds)`` hears of each round."""
    names = list(models)
    seconds = {n: [] for n in names}
    for r, batch in enumerate(batches):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order if untimed_first else ():
            step(models[name], batch)
        elapsed = dict.fromkeys(names, 0.0)
        for name in order + order[::-1]:
            elapsed[name] += timed(lambda: step(models[name], batch), synchronizer(device)) / 2
        for name in names if r >= warmup else ():
            seconds[name].append(elapsed[name])
        report(r, elapsed)
    trim_malloc()
    return seconds


def median_ratio(fast, slow):
    """Median over rounds of slow / fast, and its range."""
    ratios = [s / f for f, s in zip(fast, slow)]
    return statistics.median(ratios), min(ratios), max(ratios)


def throughput_rows(cells, units, seconds, digits=0, ratio="{:.2f}x ({:.2f}-{:.2f})"):
    """Table rows: ``cells(name)``, the median of ``units`` per second of each model and its ratio to the
    first model's within a round, median (range)."""
    first = next(iter(seconds.values()))
    return [f"| {cells(name)} | {statistics.median(u / s for u, s in zip(units, sec)):.{digits}f} | "
            + ratio.format(*median_ratio(sec, first)) + " |" for name, sec in seconds.items()]


def markdown(sections):
    """Tables under their titles (a title None: none), the empty ones left out."""
    lines = []
    for title, header, rows in sections:
        if rows:
            lines += [title, ""] * bool(title) + [header, "|---" * (header.count("|") - 1) + "|", *rows, ""]
    return lines[:-1]


def sentences(args, dictionary):
    """--mode train / decode: the models side by side on sentence-level batches; the intro and table."""
    archs, train = architectures(args), args.mode == "train"
    pairs = length_pairs(args.lengths_from, args.max_len)
    batches = make_batches(pairs, args, len(dictionary))
    if len(batches) < args.warmup + args.rounds:
        raise Refusal(f"--rounds/--warmup: {args.warmup + args.rounds} batches needed, "
                      f"{args.lengths_from or LENGTH_SAMPLE.name} gives {len(batches)}")
    models = {a: build(a, dictionary, args) for a in archs}
    units = [int(batch[3].ne(1).sum()) if train else batch[0].size(0) for batch in batches]

    def report(r, elapsed):
        label = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}/{args.rounds}"
        what = f"{units[r]} target tokens" if train else f"source length up to {batches[r][0].size(1)}"
        ratios = " ".join(f"{a} {elapsed[archs[0]] / elapsed[a]:.3f}" for a in archs[1:])
        say(f"{label}: {batches[r][0].size(0)} sentences, {what}; ratios {ratios}")

    step = train_step if train else lambda model, batch: decode_step(model, batch, dictionary, args.beam)
    untimed = meets_shapes_untimed(args.device)
    seconds = side_by_side(step, models, batches, args.warmup, args.device, untimed, report)
    dims = f"{args.size} dimensions" + (f" with {' '.join(args.model_flags)}" if args.model_flags else "")
    what = (f"Training throughput, forward + backward, {dims}, batches of at most {args.max_tokens} tokens" if train
            else f"Beam-search decoding throughput (beam {args.beam}, length penalty {decoding.LENPEN:g}), {dims}, "
                 f"batches of {args.batch_size} sentences, each decoded to the batch's longest source length")
    intro = (f"{what} (mean source length {statistics.mean(p[0] for p in pairs):.1f} tokens, lengths of "
             f"{args.lengths_from.name if args.lengths_from else 'newstest2014'}), {args.rounds} rounds (A B C C B A) "
             f"after {args.warmup} warm-up"
             + ("; each model runs each round's batch once, untimed, before it is timed." if untimed else "."))
    header = (f"| architecture | parameters | {'target tokens/s' if train else 'sentences/s'} (median) | "
              "ratio to baseline (median) | ratio range |")
    rows = throughput_rows(lambda a: f"{a} | {sum(p.numel() for p in models[a].parameters()) / 1e6:.2f}M",
                           units[args.warmup:], seconds, 0 if train else 2, "{:.3f} | {:.3f}-{:.3f}")
    return intro, [(None, header, rows)]


# ---- --mode long and crossover: long inputs, dense against banded CSAN ----------------------------
ATTENTION = {"1D": ("csan1d", {"window": 11}), "2D": ("csan2d", {"window": 11, "area_heads": 3})}  # keys of BANDED_FROM
PROBE_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}  # freed memory goes back


def attention_only(variant, impl, embed_dim=512, heads=8, device="cpu", dtype=torch.float32):
    """The CSAN sub-layer without its four projections: its ``attend_heads`` with X as Q, K, V."""
    name, opts = ATTENTION[variant]
    module = SELF_ATTENTION_VARIANTS[name](embed_dim, heads, impl=impl, **opts).to(device=device, dtype=dtype).train()
    module.q_proj = module.k_proj = module.v_proj = torch.nn.Identity()
    return module


def attention_step(module, x):
    x.grad = None
    module.attend_heads(x).sum().backward()


def _proc_status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def probe_memory(variant, impl, T, B, dtype=torch.float32):
    """Run in a fresh process (probe_command, one thread): peak resident memory of one forward +
    backward of the attention over the resident size before it (inputs and module there), in bytes."""
    module = attention_only(variant, impl, dtype=dtype)
    x = torch.randn(T, B, 512, dtype=dtype, requires_grad=True)
    before = _proc_status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current size
    attention_step(module, x)
    return _proc_status("VmHWM") - before


def probe_command(variant, impl, T, B, precision):
    """The child process that measures one peak (probe_memory), in the precision of the run."""
    return [sys.executable, "-m", MODULE, "--probe-memory", variant, impl, str(T), str(B), "--precision", precision]


def peak_memory(variant, impl, module, x, args):
    """Peak memory of one forward + backward of the attention over what was held before it, in bytes: on a
    GPU, CUDA's peak allocated in this process; on the CPU, in a fresh process (probe_memory)."""
    if args.device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        attention_step(module, x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    trim_malloc()  # the probe's memory adds to what this process holds
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_TUNING}
    T, B = x.shape[:2]
    done = subprocess.run(probe_command(variant, impl, T, B, args.precision),
                          env={**env, **PROBE_MALLOC}, capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Failed(f"memory probe {variant} {impl} T={T} failed: {why}")
    return int(done.stdout.split()[-1])


def trim_malloc():
    """Give back what the tuned malloc keeps (MALLOC_TUNING), between measurements of long inputs."""
    if platform.system() == "Linux":
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def attention_paths(variant, x, args, warmup, rows):
    """Parts 1 and 2 at one length: the attention on both paths, side by side, its rows added to
    ``rows``; the banded path's median speed-up (None where the dense path was not run)."""
    T, B = x.shape[:2]
    gb = B * 8 * T * ATTENTION[variant][1].get("area_heads", 1) * T * x.element_size() / 1e9  # dense scores alone
    paths = {impl: attention_only(variant, impl, device=args.device, dtype=args.dtype)
             for impl in (("dense", "banded") if gb <= args.dense_limit_gb else ("banded",))}
    dense = ratio = f"not run (scores alone {gb:.1f} GB)"
    speedup = None
    if "memory" in args.parts:  # first, while this process holds little memory
        mem = {impl: peak_memory(variant, impl, module, x, args) for impl, module in paths.items()}
        if "dense" in mem:
            dense, ratio = f"{mem['dense'] / 2**20:.1f}", f"{mem['dense'] / mem['banded']:.1f}"
        rows["memory"].append(f"| {T} | {B} | {variant} | {dense} | {mem['banded'] / 2**20:.1f} | {ratio} |")
        say(f"T={T} memory: {rows['memory'][-1]}")
    if "attention" in args.parts:
        sec = side_by_side(attention_step, paths, [x] * (warmup + args.rounds), warmup, args.device)
        if "dense" in sec:
            speedup, low, high = median_ratio(sec["banded"], sec["dense"])
            dense, ratio = f"{statistics.median(sec['dense']) * 1e3:.1f}", f"{speedup:.2f}x ({low:.2f}-{high:.2f})"
        rows["attention"].append(f"| {T} | {B} | {variant} | {dense} | "
                                 f"{statistics.median(sec['banded']) * 1e3:.1f} | {ratio} |")
        say(f"T={T} attention: {rows['attention'][-1]}")
    return speedup


def crossover(speedups):
    """The shortest length from which the banded path is faster (median speed-up above 1) at that
    length and at every longer one measured; None if it is not faster at the longest.
    ``speedups``: {length: median speed-up, or None where the dense path was not run (too big)}."""
    slower = [T for T, speedup in speedups.items() if speedup is not None and speedup <= 1]
    return min((T for T in speedups if T > max(slower, default=0)), default=None)


def measure_long(args, dictionary):
    """The table rows of each of --parts at each of --lengths, and the banded attention's speed-ups."""
    positions = [f"--max-{side}-positions={max(args.lengths) + 2}" for side in ("source", "target")]
    encoders = {f"transformer_{c} K={k}": [f"transformer_{c}", "--csan-layers", str(k)]
                for c in ("csan1d", "csan2d") for k in (3, 6)}
    models = ({name: build(arch, dictionary, args, *positions, *flags)
               for name, (arch, *flags) in {"transformer": ["transformer"], **encoders}.items()}
              if {"encoder", "whole"} & set(args.parts) else {})
    whole = {n: models[n] for n in ("transformer", "transformer_csan1d K=3", "transformer_csan2d K=3") if n in models}
    rows, speedups = {part: [] for part in ("attention", "memory", "encoder", "whole")}, {v: {} for v in ATTENTION}
    for T in args.lengths:
        B = max(1, args.tokens // T)
        # warm-up at every length on a GPU (a new shape's first calls are slow there) and in --mode crossover
        warmup = args.warmup if args.device == "cuda" or args.mode == "crossover" or T == args.lengths[0] else 0
        torch.manual_seed(args.seed)
        x = torch.randn(T, B, 512, device=args.device, dtype=args.dtype, requires_grad=True)
        for variant in ATTENTION if {"attention", "memory"} & set(args.parts) else ():
            speedups[variant][T] = attention_paths(variant, x, args, warmup, rows)
        gen = torch.Generator().manual_seed(args.seed)
        batch = tensors([(T, T)] * B, len(dictionary), gen, args.device) if models else None
        for part, label, step, chosen, longest in (("encoder", "encoder", encoder_step, models, T),
                                                   ("whole", "whole model", train_step, whole, args.whole_max_len)):
            if part in args.parts and T <= longest:
                seconds = side_by_side(step, chosen, [batch] * (warmup + args.rounds), warmup, args.device)
                rows[part] += throughput_rows(lambda name: f"{T} | {B} | {name}", [B * T] * args.rounds, seconds)
                say(f"T={T} {label}: {' '.join(rows[part][-len(chosen):])}")
    return rows, speedups


def long_inputs(args, dictionary):
    """--mode long: the four tables of the benchmark's docstring; --mode crossover: the first and where the
    banded path overtakes the dense one. The intro and the tables."""
    rows, speedups = measure_long(args, dictionary)
    each = (f"batches of {args.tokens} tokens (B = {args.tokens} / T sentences of T tokens), {args.rounds} rounds "
            "(A B C C B A) at each length")
    attention = ("Attention alone (no projections), forward + backward, window 11 (2D: 3 heads x 11 tokens), 8 heads "
                 "of 64, no padding; time per call (median over rounds); speed-up = dense / banded within a round, "
                 "median (range):", "| T | B | CSAN | dense ms | banded ms | banded speed-up |", rows["attention"])
    if args.mode == "crossover":
        summary = []
        for variant in ATTENTION:
            found = crossover(speedups[variant])
            cell = f"from {found} tokens" if found else f"not reached (dense faster or as fast at {max(args.lengths)})"
            cell += " (the shortest measured: it may lie below)" if found == min(args.lengths) else ""
            summary.append(f"| {variant} | {cell} | from {BANDED_FROM[variant]} tokens |")
        return f"Dense against banded CSAN attention, {each} after {args.warmup} warm-up.", [attention, (
            "Crossover: the shortest measured length from which the banded path is faster (median speed-up "
            "above 1) there and at every longer length, against the plugin's BANDED_FROM "
            "(fairseq_csan/modules/local_window_attention.py), which --csan-impl auto uses on every device:",
            "| CSAN | banded faster here | plugin's auto path: banded |", summary)]
    intro = (f"Long inputs, base dimensions (d 512, 8 heads, 6 + 6 layers), {each}, after {args.warmup} warm-up "
             f"round{'s' if args.warmup != 1 else ''} at {'each length' if args.device == 'cuda' else 'the first'}"
             f"{'; models with ' + ' '.join(args.model_flags) if args.model_flags else ''}.")
    memory = ("Peak CUDA memory of that attention (forward + backward), each path in turn in this process (peak "
              "allocated over the allocated before):" if args.device == "cuda" else "Peak memory of that attention "
              "(forward + backward), each path alone in a fresh process (peak resident size over the size before):")
    return intro, [
        attention, (memory, "| T | B | CSAN | dense MiB | banded MiB | dense / banded |", rows["memory"]),
        ("Encoder forward + backward (automatic path), source tokens/s (median) and ratio to "
         "transformer's encoder within a round, median (range); K = --csan-layers:",
         "| T | B | encoder | tokens/s | ratio to transformer |", rows["encoder"]),
        (f"Whole model, training forward + backward (targets as long as the sources, {len(dictionary)}-word "
         "joined dictionary), K = 3; tokens/s counts source tokens:",
         "| T | B | model | tokens/s | ratio to transformer |", rows["whole"]),
    ]
