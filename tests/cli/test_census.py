"""`opbench selftest --census` (#60): stock models through the ports, the same rows here and on
Dask, a model that cannot run listed with its one line, and every tiny config of the list built."""

from __future__ import annotations

import json

import pytest
import torch
from cli_runner import run_main

from accuracy.cli.text.census import render
from accuracy.workflows.model import census_models
from accuracy.workflows.model.census import select
from accuracy.workflows.model.census_models import FAMILIES, TRANSFORMERS, Family, build, inputs_for

SUBSET = ["--models", "^(torchvision_squeezenet1_1|transformers_bert)$", "--ports", "onnxruntime,threads:1"]


def _census(capsys, *args: str) -> tuple[int, dict, str]:
    result = run_main(capsys, "selftest", "--census", *args, "--json")
    return result.returncode, json.loads(result.stdout), result.stderr


def _without_seconds(rows: list[dict]) -> list[dict]:
    """The rows as a rerun must give them: all but the times."""
    return [
        {k: v for k, v in row.items() if k != "seconds"}
        | {"ports": [{k: v for k, v in p.items() if k != "seconds"} for p in row["ports"]]}
        for row in rows
    ]


@pytest.mark.slow  # two censuses of two models, one on local:2: 5.3 min at load 15, 26 s at load 7 (caches warm)
def test_a_census_here_and_on_dask_gives_the_same_table(capsys):
    status, here, err = _census(capsys, *SUBSET)
    assert status == 0 and here["complete"]
    assert [r["model"] for r in here["models"]] == ["torchvision_squeezenet1_1", "transformers_bert"]
    assert here["models"][0]["inputs"] == {"x": [1, 3, 64, 64]}
    for row in here["models"]:
        assert row["failed"] is None and [p["port"] for p in row["ports"]] == ["onnxruntime", "threads:1"]
        for port in row["ports"]:
            # every unit is counted once, by its verdict; correct ports flag none
            assert sum(port["verdicts"].values()) >= port["compared"] > 0
            assert port["flagged"] == 0 == len(port["flagged_units"])
    assert here["summary"]["models"] == 2 and here["summary"]["flagged"] == 0
    assert here["summary"]["compared"] == sum(p["compared"] for r in here["models"] for p in r["ports"])
    assert err.splitlines()[-1].startswith("census: [2/2] transformers_bert")

    status, there, _ = _census(capsys, *SUBSET, "--dask", "local:2")
    assert status == 0 and _without_seconds(there["models"]) == _without_seconds(here["models"])
    assert there["summary"] == here["summary"]

    # the text the command prints without --json, from the same rows
    header, _, *lines = render(here["models"], here["summary"]).splitlines()
    assert header.split()[:4] == ["model", "port", "units", "compared"]
    assert [line.split()[:4] for line in lines[:4]] == [
        [r["model"], p["port"], str(p["compared"]), "0"] for r in here["models"] for p in r["ports"]
    ]


def test_a_model_that_cannot_be_built_is_listed_with_its_reason_and_the_census_goes_on(capsys, monkeypatch):
    # a width the heads do not divide: BertConfig takes it, BertModel refuses it
    import torch

    if torch.cuda.is_available():
        pytest.skip("the absent port here is cuda, which this machine has")
    broken = Family("BertConfig", "BertModel", settings={"hidden_size": 30})
    monkeypatch.setitem(FAMILIES, "broken_bert", broken)
    models = ["--models", "^transformers_(broken_bert|albert)$", "--ports", "cuda"]
    status, report, _ = _census(capsys, *models)
    rows = {r["model"]: r for r in report["models"]}
    assert status == 0 and report["summary"]["models_failed"] == 1
    failed = rows["transformers_broken_bert"]["failed"]
    assert failed.startswith("cannot be built: ValueError: ") and "is not a multiple of the number" in failed
    assert rows["transformers_albert"]["failed"] is None
    assert [a["port"] for a in rows["transformers_albert"]["absent"]] == ["cuda"]

    text = run_main(capsys, "selftest", "--census", *models).stdout
    could_not = text.split("could not run:\n", 1)[1].splitlines()
    assert could_not[0].startswith("  transformers_broken_bert: ")
    assert could_not[1].startswith("  cuda on transformers_albert: no CUDA device on this machine")


@pytest.mark.parametrize(
    "args",
    [
        ["--census", "--models", "("],
        ["--census", "--models", "^no_such_model$"],
        ["--census", "--limit", "0"],
        ["--census", "--ports", "no-such-port"],
        ["--census", "--small"],
        ["--census", "exp"],
        ["--models", "bert"],
    ],
)
def test_bad_census_arguments_are_one_line_and_exit_2(capsys, args):
    result = run_main(capsys, "selftest", *args)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1


def test_the_census_takes_every_torchvision_classification_model_and_at_least_40_families():
    tv = census_models.import_torchvision()
    names = census_models.census_names()
    assert [n for n in names if n.startswith("torchvision_")] == [
        f"torchvision_{n}" for n in sorted(tv.models.list_models(module=tv.models))
    ]
    assert len(FAMILIES) >= 40
    # a model too small for 64 x 64 pixels gets the smallest size its forward takes
    assert inputs_for("torchvision_inception_v3", build("torchvision_inception_v3"))["x"].shape[2] > 64


@pytest.mark.slow  # every family built and run once: 48 s at load 7, 4.5 min at load 15 on 2 cores
def test_every_listed_tiny_config_builds_offline_and_runs():
    for family in FAMILIES:
        name = TRANSFORMERS + family
        model = getattr(census_models, name)()
        given = inputs_for(name, model)
        with torch.no_grad():
            model(**{k: torch.from_numpy(v) for k, v in given.items()})
        # tiny: small enough to judge layer by layer in seconds
        assert sum(p.numel() for p in model.parameters()) < 200_000, family


def test_models_and_limit_select_in_the_census_order():
    everything = census_models.census_names()
    assert select() == everything and select(limit=3) == everything[:3]
    berts = select("bert")
    assert berts == [n for n in everything if "bert" in n] and "transformers_megatron_bert" in berts
    assert select("^transformers_", limit=2) == ["transformers_llama", "transformers_mistral"]


def test_what_a_models_cpp_side_prints_on_stdout_leaves_the_census_json_whole(capfd, monkeypatch):
    # torch's ONNX exporter, once any export turned its log on, dumps the graph with std::cout
    # (file descriptor 1) when a graph pass fails, as on torchvision's vgg11_bn: before the census
    # moved fd 1 as well as sys.stdout, that dump came before the JSON and no parser read it
    from accuracy.workflows.model import census

    def dumping(run):
        was = torch._C._jit_is_onnx_log_enabled()
        torch._C._jit_set_onnx_log_enabled(True)
        try:
            graph = torch.jit.trace(torch.nn.ReLU(), torch.ones(2)).graph
            torch._C._jit_onnx_log("Torch IR graph at exception: ", graph)
        finally:
            torch._C._jit_set_onnx_log_enabled(was)
        return real(run)

    real = census.run_model
    monkeypatch.setattr(census, "run_model", dumping)
    result = run_main(
        capfd, "selftest", "--census", "--models", "^torchvision_squeezenet1_1$", "--ports", "threads:1", "--json"
    )
    report = json.loads(result.stdout)
    assert result.returncode == 0 and [r["model"] for r in report["models"]] == ["torchvision_squeezenet1_1"]
    assert report["models"][0]["ports"][0]["compared"] > 0
    assert "Torch IR graph at exception: graph(" in result.stderr
