"""make_cli with its own arguments: Lightning's warning about arguments in sys.argv as well is handled there, once,
for the `seqssm` command and the studies alike."""

import sys
import warnings

from seqssm.recipes import recipes_root
from seqssm.tasks.lightning_cli import make_cli


def test_given_arguments_do_not_warn_about_the_process_command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["seqssm", "study", "species", "--preset", "cpu-small"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cli = make_cli(["--config", str(recipes_root() / "quickstart.yaml")], run=False)
    assert cli.model is not None
    assert not [w for w in seen if "args parameter is intended" in str(w.message)]
    # outside make_cli the filter is gone again: it silences only the call that passes arguments on purpose
    assert not any("args parameter is intended" in str(f[1].pattern if f[1] else "") for f in warnings.filters)
