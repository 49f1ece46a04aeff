"""`seqssm reproduce` end to end at smoke sizes: a supervised claim (seqssm fit runs) and an RL claim (seqssm rl
runs), reports written (per-seed values, intervals, p-values, the plan), finished runs skipped on the second call;
matplotlib's absence is a one-line error with the fix and exit status 2."""

import json
import shutil
import sys

import pytest
import torch

from seqssm.cli import main
from seqssm.study.reproduce import CLAIMS
from seqssm.study.reproduce.claim import RECIPES

pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'seqssm[plot]'")


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def reproduce(claim, out, capsys):
    main(["reproduce", claim, "--smoke", "--seeds", "2", "--jobs", "1", "--no-bars", "--out", str(out)])
    return capsys.readouterr().out


@pytest.mark.parametrize("claim, arms", [("rope", 2), ("repeat-previous", 2)])  # the primary pairs
def test_a_claim_runs_reports_and_skips_what_is_done(claim, arms, tmp_path, capsys):
    log = reproduce(claim, tmp_path, capsys)
    folder = tmp_path / claim
    summary = json.loads((folder / "results.json").read_text())
    part = summary["budgets"][0]
    assert summary["verdict"] in ("agrees", "disagrees", "inconclusive", "precondition failed")
    assert not part["failed"] and part["folder"] == str(folder / "smoke")
    assert len(part["runs"]) == 2 * arms and all(len(v) == 2 for v in part["wall_s"].values())
    check = summary["budgets"][1]  # the same runs, read at half their training
    assert check["at"] == 0.5 and check["runs"] == part["runs"] and summary["verdicts"][1] == check["verdict"]
    report = (folder / "report.md").read_text()
    assert f"**Verdict: {summary['verdict']}**" in report and "Paper:" in report and "95% CI [" in report
    assert "Every seed:" in report and "power" in report and f"seqssm reproduce {claim} --scale full" in report
    assert all((folder / name).stat().st_size > 0 for name in report.split("](")[1:] for name in [name.split(")")[0]])
    assert f"{claim}: {summary['qualified']} -> {folder / 'report.md'}" in log
    assert summary["qualified"].startswith(summary["verdict"])

    log = reproduce(claim, tmp_path, capsys)
    assert f"{2 * arms} of {2 * arms} runs finished before: skipped" in log
    again = json.loads((folder / "results.json").read_text())["budgets"][0]
    assert again["comparisons"] == part["comparisons"]
    # nothing ran: the minutes are those of the call that ran the runs, and the report says so
    assert again["elapsed_s"] == part["elapsed_s"] and again["timing_from_earlier_call"]
    assert "in the call that ran them (this report is rebuilt" in (folder / "report.md").read_text()

    shutil.rmtree(folder / "smoke" / next(iter(part["runs"])))
    reproduce(claim, tmp_path, capsys)
    partial = json.loads((folder / "results.json").read_text())["budgets"][0]
    assert partial["reused_runs"] == 2 * arms - 1 and not partial["timing_from_earlier_call"]
    assert (f"in this call, which ran 1 of the {2 * arms} runs ({2 * arms - 1} had finished before)"
            in (folder / "report.md").read_text())


def test_list_names_every_claim_in_the_registry_s_order(capsys):
    main(["reproduce", "list"])
    out = capsys.readouterr().out
    named = [line.split()[0] for line in out.splitlines() if line and not line[0].isspace()]
    assert named == list(CLAIMS)
    assert out.count("seeds (power ") == out.count("--scale full: about ") == len(CLAIMS)


def test_without_matplotlib_the_command_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "rope", "--smoke", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith("pip install 'seqssm[plot]'")
    assert not (tmp_path / "rope").exists()  # refused before anything ran


def test_changed_settings_are_a_one_line_error(tmp_path, capsys):
    reproduce("repeat-previous", tmp_path, capsys)
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES, recipes)
    smoke = recipes / "repeat-previous" / "smoke.yaml"
    smoke.write_text(smoke.read_text().replace("total_steps: 256", "total_steps: 512"))
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "repeat-previous", "--smoke", "--seeds", "1", "--jobs", "1", "--no-bars", "--out",
              str(tmp_path), "--recipes", str(recipes)])
    assert exit_info.value.code == 2
    assert "was made with other settings" in capsys.readouterr().err
