"""Run `hf-xfmr` in-process for tests: one helper instead of a copy per test module."""

from hf_xfmr import cli


def run_cli(argv, capsys):
    """main(argv) -> (exit status, stdout, stderr), whether it returns or raises SystemExit."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err
