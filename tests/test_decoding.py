"""fairseq_csan.recipes.decoding: the papers' decoding settings, and the threads of decoding on the CPU."""

import pytest

from fairseq_csan.recipes import decoding


def test_papers_settings():
    # Yang et al. 2019 (both papers) decode as Vaswani et al. 2017: beam 4, length penalty 0.6
    assert (decoding.BEAM, decoding.LENPEN, decoding.MAX_LEN_A, decoding.MAX_LEN_B) == (4, 0.6, 1, 50)
    assert decoding.generation_overrides() == {"beam": 4, "lenpen": 0.6, "max_len_a": 1, "max_len_b": 50}
    assert decoding.generate_args(5, 1.0) == ["--beam", "5", "--lenpen", "1", "--max-len-a", "1", "--max-len-b", "50"]


def test_arguments_parse_in_fairseq_generate():
    from fairseq import options

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["/dev/null", *decoding.generate_args()])
    assert (args.beam, args.lenpen, args.max_len_a, args.max_len_b) == (4, 0.6, 1, 50)


@pytest.mark.parametrize("sentences, given, omp, threads", [
    (1, None, None, 1),  # one sentence a batch: one thread
    (16, None, None, None),  # more: torch's own (all cores)
    (1, None, "2", None),  # OMP_NUM_THREADS is the user's: torch reads it
    (128, 2, "1", 2), (1, 3, None, 3),  # --threads N wins
])
def test_the_threads_of_cpu_decoding(monkeypatch, sentences, given, omp, threads):
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert decoding.cpu_threads(sentences, given) == threads
