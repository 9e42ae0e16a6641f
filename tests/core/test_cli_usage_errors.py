"""The console entry point turns usage errors into one line on stderr and exit 2, like any bad input."""

from __future__ import annotations

import pytest

from scheduler.cli import main


@pytest.mark.parametrize("argv,expected", [
    (["serve", "--port", "abc"], "Invalid value for '--port'"),
    (["plac"], "No such command 'plac'"),
    (["place", "--no-such-flag"], "No such option"),
], ids=["wrong-type", "unknown-command", "unknown-option"])
def test_usage_errors_are_one_line_with_exit_2(argv, expected, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_no_arguments_prints_the_help_and_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 0 and "Usage:" in capsys.readouterr().out  # prog name: argv[0]
