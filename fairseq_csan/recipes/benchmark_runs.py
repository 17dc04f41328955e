"""What the benchmark measures (python -m fairseq_csan.recipes.benchmark, benchmark.py, is the
command and says how): the models, their batches, the rounds side by side, and the tables."""

import ctypes
import os
import platform
import random
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
from .runner import Failed, Refusal, say  # noqa: E402

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def build(arch, dictionary, seed=0, extra=(), device="cpu", dtype=torch.float32):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["/dev/null", "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch,
                 "--share-all-embeddings", *extra])
    task = TranslationTask(args, dictionary, dictionary)
    torch.manual_seed(seed)
    return task.build_model(args).to(device=device, dtype=dtype).train()


def make_dictionary(vocab):
    dictionary = Dictionary()
    for i in range(vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def length_pairs(prefix, max_len: int):
    """(source, target) lengths in tokens with the end of sentence: the word counts of the pair of
    files ``prefix``.en/.de, or of the shipped newstest2014 sample when ``prefix`` is None."""
    if prefix is None:
        rows = [row.split("\t") for row in LENGTH_SAMPLE.read_text(encoding="utf-8").splitlines()
                if row and not row.startswith("#")]
        words = [(int(s), int(t)) for s, t in rows]
    else:
        src = (prefix.parent / f"{prefix.name}.en").read_text(encoding="utf-8").splitlines()
        tgt = (prefix.parent / f"{prefix.name}.de").read_text(encoding="utf-8").splitlines()
        words = [(len(s.split()), len(t.split())) for s, t in zip(src, tgt)]
    pairs = [(s + 1, t + 1) for s, t in words]  # + </s>
    return [(s, t) for s, t in pairs if 1 < s <= max_len and 1 < t <= max_len]


def make_batches(pairs, max_tokens, vocab, n_batches, seed):
    """fairseq-style batches: sorted by length, each at most max_tokens (padded) tokens."""
    pairs = sorted(pairs)
    batches, current = [], []
    for pair in pairs:
        longest = max(max(p) for p in current + [pair])
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(pair)
    batches.append(current)
    rng = random.Random(seed)
    chosen = rng.sample(batches, min(n_batches, len(batches)))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for batch in chosen:
        B, S, T = len(batch), max(p[0] for p in batch), max(p[1] for p in batch)
        src = torch.full((B, S), 1, dtype=torch.long)  # pad = 1; sources left-padded as in fairseq
        tgt = torch.full((B, T), 1, dtype=torch.long)
        prev = torch.full((B, T), 1, dtype=torch.long)
        for b, (s, t) in enumerate(batch):
            src[b, S - s:] = torch.randint(4, vocab, (s,), generator=gen)
            src[b, -1] = 2  # </s>
            tgt[b, :t] = torch.randint(4, vocab, (t,), generator=gen)
            tgt[b, t - 1] = 2
            prev[b, 0] = 2
            prev[b, 1:t] = tgt[b, : t - 1]
        out.append((src, torch.tensor([p[0] for p in batch]), prev, tgt))
    return out


def make_source_batches(pairs, batch_size, vocab, n_batches, seed):
    """Batches of ``batch_size`` source sentences of similar length (sorted, then cut)."""
    lengths = sorted(s for s, _ in pairs)
    chunks = [lengths[i:i + batch_size] for i in range(0, len(lengths) - batch_size + 1, batch_size)]
    chosen = random.Random(seed).sample(chunks, min(n_batches, len(chunks)))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for chunk in chosen:
        S = max(chunk)
        src = torch.full((len(chunk), S), 1, dtype=torch.long)  # left-padded
        for b, s in enumerate(chunk):
            src[b, S - s:] = torch.randint(4, vocab, (s,), generator=gen)
            src[b, -1] = 2
        out.append((src, torch.tensor(chunk)))
    return out


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def synchronizer(device):
    """What waits for a device's queued work: on a GPU, torch.cuda.synchronize; on the CPU,
    whose calls return when their work is done, nothing."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def timed(step, sync):
    """Seconds one call of ``step`` takes, ``sync`` (synchronizer) called before and after: on a
    GPU the time then covers the kernels the call queued, not only their launch."""
    sync()
    start = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - start


def meets_shapes_untimed(device) -> bool:
    """Whether --mode train/decode runs each model once, untimed, on a round's batch before the
    timed A B C C B A: on a GPU. A GPU pays once for each new tensor shape (the choice of its
    kernels; seen in fp16 and bf16 on an NVIDIA H200, docs/speed.md), every round brings a new
    batch shape, and a training run pays that once per shape, not at every step."""
    return torch.device(device).type == "cuda"


def machine(args, tuned):
    """The line of a table that says where it was measured, in which precision."""
    versions = f"torch {torch.__version__}, Python {platform.python_version()}"
    if args.device == "cuda":
        where = (f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, TF32 matmul "
                 f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}), host {cpu_name()}, {versions}, "
                 "torch.cuda.synchronize() around each timed call")
    else:
        where = (f"{cpu_name()}, {os.cpu_count()} cores, {args.threads} thread{'s' if args.threads != 1 else ''}, {versions}, "
                 f"malloc tuning {'on' if tuned else 'off'}")
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
    generator = SequenceGenerator([model], dictionary, beam_size=beam, len_penalty=decoding.LENPEN,
                                  max_len_a=0, max_len_b=steps, min_len=steps)
    generator.forward({"net_input": {"src_tokens": src, "src_lengths": src_lengths}})


# ---- --mode long: long inputs, dense against banded CSAN ----------------------------------------
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


def dense_score_gb(variant, T, B, heads=8, dtype=torch.float32):
    """Size of the dense path's scores alone."""
    area = ATTENTION[variant][1].get("area_heads", 1)
    return B * heads * T * area * T * torch.empty((), dtype=dtype).element_size() / 1e9


def _proc_status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def probe_memory(variant, impl, T, B, dtype=torch.float32):
    """Run in a fresh process: peak resident memory of one forward + backward of the attention
    over the resident size before it (inputs and module already there), in bytes (the child
    runs one thread: probe_command)."""
    module = attention_only(variant, impl, dtype=dtype)
    x = torch.randn(T, B, 512, dtype=dtype, requires_grad=True)
    before = _proc_status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current size
    attention_step(module, x)
    return _proc_status("VmHWM") - before


def cuda_peak_memory(module, x):
    """Peak CUDA memory allocated during one forward + backward of the attention, over what was
    allocated before it, in bytes."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    attention_step(module, x)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def probe_command(variant, impl, T, B, precision):
    """The child process that measures one peak (probe_memory), in the precision of the run."""
    return [sys.executable, "-m", MODULE, "--probe-memory", variant, impl, str(T), str(B), "--precision", precision]


def peak_memory(variant, impl, T, B, precision):
    trim_malloc()  # the probe's memory adds to what this process holds
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_TUNING}
    done = subprocess.run(probe_command(variant, impl, T, B, precision),
                          env={**env, **PROBE_MALLOC}, capture_output=True, text=True)
    if done.returncode != 0:
        raise Failed(f"memory probe {variant} {impl} T={T} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return int(done.stdout.split()[-1])


def trim_malloc():
    """Give back what the tuned malloc keeps (MALLOC_TUNING), between measurements of long inputs."""
    if platform.system() == "Linux":
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def side_by_side(steps, rounds, warmup, device="cpu"):
    """Seconds per call of each step, per round, in rounds of A B C C B A (see the docstring)."""
    names = list(steps)
    seconds = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        elapsed = dict.fromkeys(names, 0.0)
        for name in order + order[::-1]:
            elapsed[name] += timed(steps[name], synchronizer(device)) / 2
        if r >= warmup:
            for name in names:
                seconds[name].append(elapsed[name])
    trim_malloc()
    return seconds


def median_ratio(fast, slow):
    """Median over rounds of slow / fast, and its range."""
    ratios = [s / f for f, s in zip(fast, slow)]
    return statistics.median(ratios), min(ratios), max(ratios)


def throughput_rows(T, B, seconds):
    """Source tokens/s of each model and its ratio to transformer's, as table rows."""
    return [f"| {T} | {B} | {name} | {statistics.median(B * T / s for s in sec):.0f} | "
            "{:.2f}x ({:.2f}-{:.2f}) |".format(*median_ratio(sec, seconds["transformer"]))
            for name, sec in seconds.items()]


def long_batch(T, B, vocab, seed, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (B, T), generator=gen)
    src[:, -1] = 2
    tgt = torch.randint(4, vocab, (B, T), generator=gen)
    tgt[:, -1] = 2
    prev = torch.cat([torch.full((B, 1), 2), tgt[:, :-1]], dim=1)
    return tuple(t.to(device) for t in (src, torch.full((B,), T), prev, tgt))


def encoder_step(model, batch):
    src, src_lengths = batch[:2]
    out = model.encoder(src, src_lengths=src_lengths)
    out["encoder_out"][0].float().sum().backward()
    model.zero_grad(set_to_none=True)


def attention_paths(variant, T, B, x, args, warmup):
    """Part 1 (and 2) at one length: the attention on both paths, side by side. Returns the table
    rows and the banded path's median speed-up (None where the dense path was not run)."""
    device, dtype = args.device, PRECISIONS[args.precision]
    paths = {impl: attention_only(variant, impl, device=device, dtype=dtype) for impl in ("dense", "banded")}
    gb = dense_score_gb(variant, T, B, dtype=dtype)
    if gb > args.dense_limit_gb:
        steps = {"banded": lambda: attention_step(paths["banded"], x)}
    else:
        steps = {impl: (lambda m=m: attention_step(m, x)) for impl, m in paths.items()}
    skipped = f"not run (scores alone {gb:.1f} GB)"
    memory_row = attn_row = speedup = None
    if "memory" in args.parts:  # first, while this process holds little memory
        if device == "cuda":
            mem = {impl: cuda_peak_memory(paths[impl], x) for impl in steps}
        else:
            mem = {impl: peak_memory(variant, impl, T, B, args.precision) for impl in steps}
        mem_dense, mem_ratio = skipped, skipped
        if "dense" in mem:
            mem_dense, mem_ratio = f"{mem['dense'] / 2**20:.1f}", f"{mem['dense'] / mem['banded']:.1f}"
        memory_row = f"| {T} | {B} | {variant} | {mem_dense} | {mem['banded'] / 2**20:.1f} | {mem_ratio} |"
        say(f"T={T} memory: {memory_row}")
    if "attention" in args.parts:
        sec = side_by_side(steps, args.rounds, warmup, device)
        banded_ms = statistics.median(sec["banded"]) * 1e3
        if "dense" in sec:
            speedup, low, high = median_ratio(sec["banded"], sec["dense"])
            ratio = f"{speedup:.2f}x ({low:.2f}-{high:.2f})"
            dense_ms = f"{statistics.median(sec['dense']) * 1e3:.1f}"
        else:
            ratio = dense_ms = skipped
        attn_row = f"| {T} | {B} | {variant} | {dense_ms} | {banded_ms:.1f} | {ratio} |"
        say(f"T={T} attention: {attn_row}")
    return attn_row, memory_row, speedup


def crossover(speedups):
    """The shortest length from which the banded path is faster (median speed-up above 1) at that
    length and at every longer one measured; None if it is not faster at the longest.
    ``speedups``: {length: median speed-up, or None where the dense path was not run (too big)}."""
    found = None
    for T in sorted(speedups, reverse=True):
        if speedups[T] is not None and speedups[T] <= 1:
            break
        found = T
    return found


def warmup_at(args, T):
    """Warm-up rounds at this length: on a GPU and in --mode crossover at every length, otherwise
    at the first only (the first calls of a model are slow; later ones not)."""
    every = args.device == "cuda" or args.mode == "crossover"
    return args.warmup if every or T == args.lengths[0] else 0


ATTENTION_TITLE = ("Attention alone (no projections), forward + backward, window 11 (2D: 3 heads x 11 tokens), "
                   "8 heads of 64, no padding; time per call (median over rounds); speed-up = dense / banded "
                   "within a round, median (range):")
ATTENTION_HEADER = "| T | B | CSAN | dense ms | banded ms | banded speed-up |"


def markdown(sections):
    """Titled tables, the empty ones left out."""
    lines = []
    for title, header, rows in sections:
        if rows:
            lines += [title, "", header, "|---" * (header.count("|") - 1) + "|", *rows, ""]
    return lines[:-1]


def long_inputs(args, dictionary):
    """--mode long: the four tables of the module docstring, as markdown lines."""
    device, dtype = args.device, PRECISIONS[args.precision]
    positions = ["--max-source-positions", str(max(args.lengths) + 2), "--max-target-positions", str(max(args.lengths) + 2)]
    encoders = {"transformer": []}
    for variant in ("csan1d", "csan2d"):
        for K in (3, 6):
            encoders[f"transformer_{variant} K={K}"] = [f"transformer_{variant}", "--csan-layers", str(K)]
    models = {name: build(extra[0] if extra else "transformer", dictionary, extra=[*positions, *extra[1:], *args.model_flags],
                          device=device, dtype=dtype)
              for name, extra in encoders.items()} if {"encoder", "whole"} & set(args.parts) else {}
    whole = ["transformer", "transformer_csan1d K=3", "transformer_csan2d K=3"]
    attn_rows, memory_rows, encoder_rows, whole_rows = [], [], [], []
    for T in args.lengths:
        B = max(1, args.tokens // T)
        warmup = warmup_at(args, T)
        torch.manual_seed(args.seed)
        x = torch.randn(T, B, 512, device=device, dtype=dtype, requires_grad=True)
        for variant in ATTENTION if {"attention", "memory"} & set(args.parts) else ():
            attn_row, memory_row, _ = attention_paths(variant, T, B, x, args, warmup)
            attn_rows += [attn_row] if attn_row else []
            memory_rows += [memory_row] if memory_row else []
        batch = long_batch(T, B, len(dictionary), args.seed, device)
        if "encoder" in args.parts:
            steps = {n: (lambda m=m: encoder_step(m, batch)) for n, m in models.items()}
            encoder_rows += throughput_rows(T, B, side_by_side(steps, args.rounds, warmup, device))
            say(f"T={T} encoder: {' '.join(encoder_rows[-len(steps):])}")
        if "whole" in args.parts and T <= args.whole_max_len:
            steps = {n: (lambda m=models[n]: train_step(m, batch)) for n in whole}
            whole_rows += throughput_rows(T, B, side_by_side(steps, args.rounds, warmup, device))
            say(f"T={T} whole model: {' '.join(whole_rows[-len(steps):])}")
    if device == "cuda":
        memory_title = ("Peak CUDA memory of that attention (forward + backward), each path in turn in this process "
                        "(peak allocated over the allocated before):")
    else:
        memory_title = ("Peak memory of that attention (forward + backward), each path alone in a fresh process "
                        "(peak resident size over the size before):")
    return markdown([
        (ATTENTION_TITLE, ATTENTION_HEADER, attn_rows),
        (memory_title, "| T | B | CSAN | dense MiB | banded MiB | dense / banded |", memory_rows),
        ("Encoder forward + backward (automatic path), source tokens/s (median) and ratio to "
         "transformer's encoder within a round, median (range); K = --csan-layers:",
         "| T | B | encoder | tokens/s | ratio to transformer |", encoder_rows),
        (f"Whole model, training forward + backward (targets as long as the sources, {len(dictionary)}-word "
         "joined dictionary), K = 3; tokens/s counts source tokens:",
         "| T | B | model | tokens/s | ratio to transformer |", whole_rows),
    ])


def crossover_table(args):
    """--mode crossover: the attention on both paths at every length, and where banded overtakes."""
    device, dtype = args.device, PRECISIONS[args.precision]
    args.parts = ["attention"]
    rows, speedups = [], {variant: {} for variant in ATTENTION}
    for T in args.lengths:
        B = max(1, args.tokens // T)
        torch.manual_seed(args.seed)
        x = torch.randn(T, B, 512, device=device, dtype=dtype, requires_grad=True)
        for variant in ATTENTION:
            row, _, speedups[variant][T] = attention_paths(variant, T, B, x, args, warmup_at(args, T))
            rows.append(row)
    summary = []
    for variant in ATTENTION:
        found = crossover(speedups[variant])
        measured = (f"from {found} tokens" if found is not None
                    else f"not reached (dense faster or as fast at {max(args.lengths)})")
        if found == min(args.lengths):
            measured += " (the shortest measured: it may lie below)"
        summary.append(f"| {variant} | {measured} | from {BANDED_FROM[variant]} tokens |")
    return [*markdown([(ATTENTION_TITLE, ATTENTION_HEADER, rows)]), "",
            "Crossover: the shortest measured length from which the banded path is faster (median speed-up "
            "above 1) there and at every longer length, against the plugin's BANDED_FROM "
            "(fairseq_csan/modules/local_window_attention.py), which --csan-impl auto uses on every device:",
            "", "| CSAN | banded faster here | plugin's auto path: banded |", "|---|---|---|", *summary]


def sentences(args, dictionary, tuned):
    """--mode train / decode: the models side by side on sentence-level batches; the table's lines."""
    device, dtype = args.device, PRECISIONS[args.precision]
    archs = architectures(args)
    baseline = archs[0]
    pairs = length_pairs(args.lengths_from, args.max_len)
    n_batches = args.warmup + args.rounds
    if args.mode == "train":
        batches = make_batches(pairs, args.max_tokens, len(dictionary), n_batches, args.seed)
        step = train_step
    else:
        batches = make_source_batches(pairs, args.batch_size, len(dictionary), n_batches, args.seed)
        step = lambda model, batch: decode_step(model, batch, dictionary, args.beam)  # noqa: E731
    if len(batches) < n_batches:
        raise Refusal(f"--rounds/--warmup: {n_batches} batches needed, {args.lengths_from or LENGTH_SAMPLE.name} "
               f"gives {len(batches)}")
    batches = [tuple(t.to(device) for t in batch) for batch in batches]
    models = {a: build(a, dictionary, extra=args.model_flags, device=device, dtype=dtype) for a in archs}
    if args.mode == "decode":
        for model in models.values():
            model.eval()
    params = {a: sum(p.numel() for p in m.parameters()) for a, m in models.items()}

    tokens = {a: [] for a in archs}
    seconds = {a: [] for a in archs}
    for r, batch in enumerate(batches):
        order = archs[r % len(archs):] + archs[: r % len(archs)]
        units = int(batch[3].ne(1).sum()) if args.mode == "train" else batch[0].size(0)
        elapsed = dict.fromkeys(archs, 0.0)
        if meets_shapes_untimed(device):
            for arch in order:
                step(models[arch], batch)
        for arch in order + order[::-1]:
            elapsed[arch] += timed(lambda: step(models[arch], batch), synchronizer(device))
        if r >= args.warmup:
            for arch in archs:
                tokens[arch].append(2 * units)
                seconds[arch].append(elapsed[arch])
        label = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}/{args.rounds}"
        what = f"{units} target tokens" if args.mode == "train" else f"source length up to {batch[0].size(1)}"
        ratios = " ".join(f"{a} {elapsed[baseline] / elapsed[a]:.3f}" for a in archs[1:])
        say(f"{label}: {batch[0].size(0)} sentences, {what}; ratios {ratios}")

    return sentences_table(args, tuned, pairs, archs, params, tokens, seconds)


def sentences_table(args, tuned, pairs, archs, params, tokens, seconds) -> list:
    """The lines of --mode train / decode's table: each model's median throughput and its ratio to
    the baseline's (the first), from the rounds measured side by side."""
    baseline, device = archs[0], args.device
    src_len = statistics.mean(p[0] for p in pairs)
    dims = f"{args.size} dimensions" + (f" with {' '.join(args.model_flags)}" if args.model_flags else "")
    if args.mode == "train":
        what = f"Training throughput, forward + backward, {dims}, batches of at most {args.max_tokens} tokens"
        unit = "target tokens/s"
    else:
        what = (f"Beam-search decoding throughput (beam {args.beam}, length penalty {decoding.LENPEN:g}), {dims}, "
                f"batches of {args.batch_size} sentences, each decoded to the batch's longest source length")
        unit = "sentences/s"
    lines = [
        f"{what} (mean source length {src_len:.1f} tokens, lengths of "
        f"{args.lengths_from.name if args.lengths_from else 'newstest2014'}), {args.rounds} rounds (A B C C B A) after {args.warmup} warm-up"
        + ("; each model runs each round's batch once, untimed, before it is timed." if meets_shapes_untimed(device) else "."),
        machine(args, tuned),
        "",
        f"| architecture | parameters | {unit} (median) | ratio to baseline (median) | ratio range |",
        "|---|---|---|---|---|",
    ]
    for arch in archs:
        tps = [t / s for t, s in zip(tokens[arch], seconds[arch])]
        ratios = [(t / s) / (tb / sb) for t, s, tb, sb in zip(tokens[arch], seconds[arch], tokens[baseline], seconds[baseline])]
        lines.append(
            f"| {arch} | {params[arch] / 1e6:.2f}M | {statistics.median(tps):.{0 if args.mode == 'train' else 2}f} | "
            f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} |"
        )
    return lines


