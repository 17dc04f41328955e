"""Training or decoding throughput of each architecture against the Transformer, side by side.

Not a test. Every architecture runs the very same batches, in rounds: each round runs one
batch through every model in a rotating order and then in the reverse order (A B C C B A), so
that drift in the machine's speed hits all of them alike. The ratio of an architecture in a
round is its throughput over the baseline's in that round; the table reports the median over
rounds and their range.

--mode train (default): forward + backward of the cross-entropy loss (no optimizer step) on
batches of at most --max-tokens tokens; throughput in target tokens/s.

--mode decode: fairseq's beam search (SequenceGenerator, --beam 4, --lenpen 0.6, the papers'
setting) in eval mode over batches of --batch-size source sentences; throughput in
sentences/s. The weights are untrained, so the end of sentence is banned until the batch's
longest source length and forced there: every model decodes the same number of steps.

On Linux the script re-executes itself with glibc's malloc told to keep freed memory
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_): otherwise every step of a
base model page-faults its activations in again, which on a 2-core machine costs about a third
of the step and most of the noise. It speeds all models alike; --no-malloc-tuning turns it off.

Batches: sentence pairs whose lengths are the word counts of real newstest2014 En-De pairs
(newstest2014_lengths.tsv, shipped with the package; --lengths-from PREFIX takes them from any
pair of files PREFIX.en/.de instead, e.g. a prepared task's raw/test), sorted by length and cut into batches
of at most --max-tokens tokens, as fairseq batches them; token ids are random.

--table1 times every architecture of the CSAN paper's Table 1 in one run: the seven locality
baselines, 1D-CSAN and 2D-CSAN, each against the Transformer.

--mode long: long inputs (docs/long_inputs.md). For each of --lengths T (256 .. 8192), batches
of --tokens tokens (B = tokens / T sentences of T tokens, no padding), base dimensions, random
token ids, side by side in one process in rounds as above:
  1. the attention alone (the CSAN sub-layer without its four projections, window 11, area 3
     heads x 11 tokens), forward + backward, on the dense and on the banded path, 1D and 2D;
  2. the peak memory of that attention, each path in a fresh process (peak resident set size
     over the process's size before the forward pass, on Linux);
  3. the encoder's forward + backward throughput of transformer_csan1d/csan2d (automatic path)
     with --csan-layers 3 and 6, against transformer's;
  4. the whole model's training step (forward + backward, targets as long as the sources) of
     transformer_csan1d/csan2d at --csan-layers 3 against transformer's.
A dense attention whose scores would take more than --dense-limit-gb is not run (the table
says so). --parts takes only some of the four; warm-up rounds run at the first length only
(on a GPU at every length: a new shape's first call allocates memory). On a GPU, part 2 is the
peak of torch.cuda.max_memory_allocated over what was allocated before, in this process.

--mode crossover: from how many tokens the banded path is faster than the dense one, on this
device and in this precision: the attention of part 1 above, 1D and 2D, at each of --lengths
(32 .. 512), with --warmup rounds at every length. The crossover of a CSAN is the shortest
measured length from which the banded path's median speed-up is above 1 at that length and every
longer one; the table sets it beside the plugin's BANDED_FROM, which --csan-impl auto uses on
every device.

--device cuda times on the GPU: batches and models live there, and each timed call is bracketed
by torch.cuda.synchronize(), so a time covers the kernels the call queued, not only their launch.
In --mode train and decode each model first runs each round's batch once, untimed: a GPU pays once
for each new tensor shape, which training pays once per shape and not at every step.
--precision fp16 / bf16 cast the model to that type, as fairseq-train and fairseq-generate do with
--fp16 / --bf16 (the loss and the log-probabilities stay in float32, as there); fp32 is the default.
--all times every architecture of docs/speed.md (Table 1 and the two context-aware models);
--model-flags adds fairseq model flags to every model (e.g. smaller dimensions).

usage: python -m fairseq_csan.recipes.benchmark [--mode train|decode|long|crossover] [--size base|big]
                                   [--device cpu|cuda] [--precision fp32|fp16|bf16] [--rounds 5]
                                   [--max-tokens 4096] [--batch-size 64] [--archs ARCH ... | --table1 | --all]
                                   [--lengths 256 ... 8192] [--tokens 8192] [--parts attention memory encoder whole]
                                   [--out FILE [--force]]
"""

import argparse
import ctypes
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import fairseq_csan  # noqa: F401  (registers the architectures)
from fairseq_csan.modules import SELF_ATTENTION_VARIANTS
from fairseq_csan.modules.local_window_attention import BANDED_FROM
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks.translation import TranslationTask
from fairseq_csan.recipes import decoding
from fairseq_csan.recipes.runner import Refusal, check_replaceable, check_writable, write_whole

MODULE = "fairseq_csan.recipes.benchmark"  # this module, run again in a child process
# the sentence lengths of newstest2014 En-De (word counts only), shipped so that nothing need be prepared
LENGTH_SAMPLE = Path(__file__).with_name("newstest2014_lengths.tsv")
BASELINE = {"base": "transformer", "big": "transformer_vaswani_wmt_en_de_big"}
TABLE1 = ["transformer_bidirect", "transformer_relpos", "transformer_neighbor", "transformer_local_hard",
          "transformer_local_soft", "transformer_block", "transformer_cnn", "transformer_csan1d", "transformer_csan2d"]
ALL = TABLE1 + ["transformer_ctxaware", "transformer_csan2d_ctxaware"]  # every row of docs/speed.md
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PRECISION_TEXT = {"fp32": "fp32 (float32 weights and activations)",
                  "fp16": "fp16 (the model cast to float16, as fairseq's --fp16 does)",
                  "bf16": "bf16 (the model cast to bfloat16, as fairseq's --bf16 does)"}
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),
    "MALLOC_TOP_PAD_": str(1 << 30),
}


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
LONG_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
LONG_PARTS = ["attention", "memory", "encoder", "whole"]
CROSSOVER_LENGTHS = [32, 48, 64, 96, 128, 160, 192, 256, 384, 512]
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
        sys.exit(f"memory probe {variant} {impl} T={T} failed:\n{done.stderr[-2000:]}")
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


def log(message):
    print(f"[benchmark] {message}", file=sys.stderr, flush=True)


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
        log(f"T={T} memory: {memory_row}")
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
        log(f"T={T} attention: {attn_row}")
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
            log(f"T={T} encoder: {' '.join(encoder_rows[-len(steps):])}")
        if "whole" in args.parts and T <= args.whole_max_len:
            steps = {n: (lambda m=models[n]: train_step(m, batch)) for n in whole}
            whole_rows += throughput_rows(T, B, side_by_side(steps, args.rounds, warmup, device))
            log(f"T={T} whole model: {' '.join(whole_rows[-len(steps):])}")
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


def positive(kind, least=1):
    def parse(text):
        value = kind(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {text}")
        return value
    return parse


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--archs", nargs="+", default=["transformer_csan1d", "transformer_csan2d", "transformer_ctxaware"])
    chosen.add_argument("--table1", action="store_true",
                        help="instead of --archs: the CSAN paper's Table 1 (seven baselines, csan1d, csan2d)")
    chosen.add_argument("--all", action="store_true",
                        help="instead of --archs: every row of docs/speed.md (Table 1 and the two context-aware models)")
    parser.add_argument("--mode", choices=["train", "decode", "long", "crossover"], default="train")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to time (default cpu)")
    parser.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                        help="fp32 (default), or the model cast to fp16 / bf16 as fairseq's --fp16 / --bf16 do")
    parser.add_argument("--size", choices=["base", "big"], default="base")
    parser.add_argument("--model-flags", type=shlex.split, default=[], metavar="'FLAGS'",
                        help="fairseq model flags added to every model, in one quoted string")
    parser.add_argument("--max-tokens", type=positive(int), default=4096, help="training batch size in tokens")
    parser.add_argument("--batch-size", type=positive(int), default=64, help="decoding batch size in sentences")
    parser.add_argument("--beam", type=positive(int), default=decoding.BEAM, help=f"decoding beam size (default {decoding.BEAM}, the papers')")
    parser.add_argument("--rounds", type=positive(int), default=5, help="timed rounds (one batch per model each)")
    parser.add_argument("--warmup", type=positive(int, 0), default=1,
                        help="untimed rounds first (--mode long: at the first length; on a GPU and in "
                             "--mode crossover: at every length)")
    parser.add_argument("--vocab", type=positive(int, 5), default=32000, help="joined dictionary size")
    parser.add_argument("--lengths-from", type=Path, metavar="PREFIX",
                        help="prefix of an .en/.de pair of files whose word counts give the lengths "
                             f"(default: newstest2014's, shipped as {LENGTH_SAMPLE.name})")
    parser.add_argument("--max-len", type=positive(int), default=128)
    parser.add_argument("--threads", type=positive(int), default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the markdown table here (a file the benchmark wrote "
                        "is replaced with --force only; anyone else's never)")
    parser.add_argument("--force", action="store_true", help="replace an --out that the benchmark wrote")
    parser.add_argument("--no-malloc-tuning", action="store_true", help="keep glibc malloc's defaults")
    parser.add_argument("--lengths", type=positive(int), nargs="+",
                        help=f"--mode long: sequence lengths (default {' '.join(map(str, LONG_LENGTHS))}); "
                             f"--mode crossover: the same (default {' '.join(map(str, CROSSOVER_LENGTHS))})")
    parser.add_argument("--tokens", type=positive(int), default=8192, help="--mode long and crossover: tokens per batch")
    parser.add_argument("--dense-limit-gb", type=float, default=4.0,
                        help="--mode long and crossover: skip a dense attention whose scores alone exceed this")
    parser.add_argument("--whole-max-len", type=int, default=4096,
                        help="--mode long: time the whole model's training step up to this length")
    parser.add_argument("--parts", nargs="+", choices=LONG_PARTS, default=LONG_PARTS,
                        help="--mode long: which of the four measurements to take")
    parser.add_argument("--probe-memory", nargs=4, metavar=("CSAN", "IMPL", "T", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lengths is None:
        args.lengths = CROSSOVER_LENGTHS if args.mode == "crossover" else LONG_LENGTHS
    return args


def refuse(message):
    """A bad configuration: one line naming the flag, exit status 2 (as argparse's own errors)."""
    print(f"benchmark: error: {message}", file=sys.stderr)
    sys.exit(2)


def check_device(args):
    if args.device != "cuda":
        return
    if not torch.cuda.is_available():
        refuse("--device cuda: no CUDA device here (torch.cuda.is_available() is False); use --device cpu")
    if args.precision == "bf16" and not torch.cuda.is_bf16_supported():
        refuse(f"--precision bf16: {torch.cuda.get_device_name()} has no bfloat16 support; use fp16 or fp32")


def main():
    args = parse_args()
    if args.probe_memory:  # a child of --mode long: one measurement, printed
        variant, impl, T, B = args.probe_memory
        torch.set_num_threads(1)
        print(probe_memory(variant, impl, int(T), int(B), PRECISIONS[args.precision]))
        return
    check_device(args)
    if args.out:
        try:
            check_writable(args.out, "--out")
            check_replaceable(args.out, "benchmark", args.force, "--out")
        except Refusal as error:
            refuse(str(error))
    if args.mode in ("train", "decode"):
        architectures(args)  # an unknown one fails here, before any work
    if args.mode in ("train", "decode") and args.lengths_from and not Path(f"{args.lengths_from}.en").exists():
        refuse(f"--lengths-from: no length source at {args.lengths_from}.en; give --lengths-from PREFIX "
               "(an .en/.de pair, e.g. newstest2014)")
    tuned = all(os.environ.get(k) == v for k, v in MALLOC_TUNING.items())
    if not args.no_malloc_tuning and not tuned and platform.system() == "Linux":
        os.execve(sys.executable, [sys.executable, "-m", MODULE, *sys.argv[1:]], {**os.environ, **MALLOC_TUNING})
    torch.set_num_threads(args.threads)
    dictionary = make_dictionary(args.vocab)
    if args.mode == "long":
        lines = [
            f"Long inputs, base dimensions (d 512, 8 heads, 6 + 6 layers), batches of {args.tokens} tokens "
            f"(B = {args.tokens} / T sentences of T tokens), {args.rounds} rounds (A B C C B A) at each length, "
            f"after {args.warmup} warm-up round{'s' if args.warmup != 1 else ''} at "
            f"{'each length' if args.device == 'cuda' else 'the first'}"
            f"{'; models with ' + ' '.join(args.model_flags) if args.model_flags else ''}.",
            machine(args, tuned), "", *long_inputs(args, dictionary)]
    elif args.mode == "crossover":
        lines = [
            f"Dense against banded CSAN attention, batches of {args.tokens} tokens (B = {args.tokens} / T sentences "
            f"of T tokens), {args.rounds} rounds (A B C C B A) at each length after {args.warmup} warm-up.",
            machine(args, tuned), "", *crossover_table(args)]
    else:
        lines = sentences(args, dictionary, tuned)
    lines += ["", "Command: python -m fairseq_csan.recipes.benchmark " + " ".join(map(shlex.quote, sys.argv[1:]))]
    table = "\n".join(lines)
    print(table)
    if args.out:
        write_whole(args.out, table + "\n", "benchmark")


def architectures(args):
    """The baseline first, then the chosen architectures, at --size."""
    chosen = ALL if args.all else TABLE1 if args.table1 else args.archs
    archs = [BASELINE[args.size]] + [a if args.size == "base" or a.endswith("_big") else a + "_big" for a in chosen]
    unknown = [a for a in archs if a not in ARCH_MODEL_REGISTRY]
    if unknown:
        refuse(f"--archs/--size: no architecture {', '.join(unknown)} (big variants exist for "
               f"{', '.join(a for a in ARCH_MODEL_REGISTRY if a.endswith('_big') and a.startswith('transformer_'))})")
    return archs


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
        refuse(f"--rounds/--warmup: {n_batches} batches needed, {args.lengths_from or LENGTH_SAMPLE.name} "
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
        log(f"{label}: {batch[0].size(0)} sentences, {what}; ratios {ratios}")

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


if __name__ == "__main__":
    from .runner import as_command

    as_command(main)
