"""fairseq_csan.recipes.decoding: the papers' decoding settings and their command line."""

import subprocess
import sys

from fairseq_csan.recipes import decoding


def test_papers_settings():
    # Yang et al. 2019 (both papers) decode as Vaswani et al. 2017: beam 4, length penalty 0.6
    assert (decoding.BEAM, decoding.LENPEN, decoding.MAX_LEN_A, decoding.MAX_LEN_B) == (4, 0.6, 1, 50)
    assert decoding.generation_overrides() == {"beam": 4, "lenpen": 0.6, "max_len_a": 1, "max_len_b": 50}


def test_cli_prints_fairseq_generate_arguments():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.decoding", *args],
                              capture_output=True, text=True, check=True).stdout

    assert cli() == "--beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50\n"
    assert cli("--beam", "5", "--lenpen", "1.0") == "--beam 5 --lenpen 1 --max-len-a 1 --max-len-b 50\n"


def test_arguments_parse_in_fairseq_generate():
    from fairseq import options

    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, ["/dev/null", *decoding.generate_args()])
    assert (args.beam, args.lenpen, args.max_len_a, args.max_len_b) == (4, 0.6, 1, 50)


def test_cli_refuses_a_beam_below_one():
    done = subprocess.run([sys.executable, "-m", "fairseq_csan.recipes.decoding", "--beam", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--beam must be a positive whole number, got 0" in done.stderr
