"""The causal CLI commands on tiny models: outputs written, numbers equal to the engine's, user errors exit 2."""

from __future__ import annotations

import json

import pandas as pd

from vitlab import cli


def test_head_ablation_command(tmp_path):
    out = tmp_path / "abl"
    rc = cli.main(["head-ablation", "-m", "test_vit@random:0", "--other", "test_resnet@random:0", "-d", "samples",
                   "-n", "8", "-b", "4", "--blocks", "0,1", "--k", "1", "--draws", "2", "--modes", "zero",
                   "-o", str(out)])
    assert rc == 0
    frame = pd.read_csv(out / "ablation.csv")
    assert list(frame["selection"]) == ["local", "global", "random", "random"] and set(frame["mode"]) == {"zero"}
    for stem in ("delta_accuracy", "kl", "cka"):
        assert all((out / f"{stem}.{ext}").stat().st_size > 0 for ext in ("png", "svg"))
    assert set(pd.read_csv(out / "summary.csv")["selection"]) == {"local", "global", "random"}
    assert (out / "verdicts.csv").is_file() and (out / "cka.csv").is_file()
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == "head-ablation" and run["blocks"] == [0, 1] and len(run["heads_by_distance"]) == 4


def test_attribution_command(tmp_path):
    out = tmp_path / "att"
    rc = cli.main(["attribution", "-m", "test_vit@random:0", "-d", "samples", "-n", "2", "--methods",
                   "rollout,grad-rollout", "--random-orders", "1", "--cell-px", "32", "-o", str(out)])
    assert rc == 0
    frame = pd.read_csv(out / "faithfulness.csv")
    assert len(frame) == 4 and set(frame["method"]) == {"rollout", "grad-rollout"}
    assert (out / "map_grad-rollout.png").is_file() and (out / "curves.svg").is_file()
    assert len(pd.read_csv(out / "faithfulness_summary.csv")) == 4
    assert json.loads((out / "run.json").read_text())["cells"] == 25


def test_token_norms_command(tmp_path):
    out = tmp_path / "tn"
    assert cli.main(["token-norms", "-m", "test_vit@random:0", "-d", "samples", "-n", "8", "-b", "4", "--k", "2",
                     "-o", str(out)]) == 0
    flags = pd.read_csv(out / "token_norms.csv")
    assert len(flags) == 12 and {"threshold", "energy_share"} <= set(flags.columns)
    assert (out / "cka_flagged_left_out.png").is_file() and (out / "attention_distance.csv").is_file()


def test_user_errors_exit_2(tmp_path, capsys):
    assert cli.main(["attribution", "-m", "test_vit@random:0", "-d", "samples", "-n", "1", "--methods", "gradcam",
                     "-o", str(tmp_path)]) == 2
    assert "gradcam is for CNN stages" in capsys.readouterr().err
    assert cli.main(["head-ablation", "-m", "test_resnet@random:0", "--other", "test_vit@random:0", "-d", "samples",
                     "-n", "4", "-o", str(tmp_path)]) == 2
    assert cli.main(["token-norms", "-m", "test_vit@random:0", "-d", "samples", "--k", "-1", "-o",
                     str(tmp_path)]) == 2
    assert "k must be positive" in capsys.readouterr().err
