"""A run stops where it checks (issue 51): ``Run.should_stop`` makes the next ``run.check()`` raise ``RunStopped``,
between batches and inside long steps, and what was computed before the stop stays in the store. In the app,
``lab.compute`` wires it to Streamlit's stop and rerun requests (Cancel, a closed tab, another page)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import vitlab
from vitlab.analyses import attribution, probes, receptive
from vitlab.engine.context import Run, RunStopped
from vitlab.engine.run import CKAOptions, cka

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))  # the app's `lab`, as tests/test_app.py


def stop_after(calls: int):
    """A should_stop that says yes from its ``calls + 1``-th call on; counts its calls."""
    seen = []

    def should_stop() -> bool:
        seen.append(1)
        return len(seen) > calls

    should_stop.seen = seen
    return should_stop


def stop_at_progress(done: int):
    """(progress, should_stop): the stop is asked for when the bar reports ``done`` (as a Cancel click that arrives
    while batch ``done + 1`` is about to start)."""
    asked = []

    def progress(d: int, total: int, text: str) -> None:
        if d == done and "batch" in text:
            asked.append(text)

    return progress, lambda: bool(asked)


def test_check_raises_only_when_asked():
    Run().check("nothing asked")  # no should_stop: never stops
    Run(should_stop=lambda: False).check()
    with pytest.raises(RunStopped, match="stopped: block 3"):
        Run(should_stop=lambda: True).check("block 3")
    assert issubclass(Run.Stopped, Exception) and Run.Stopped is RunStopped
    assert not issubclass(RunStopped, vitlab.VitlabError)  # a stop is not an error shown in red


def test_stream_stops_between_batches_and_keeps_done_batches(tiny_vit, fmnist_source, store):
    opts = CKAOptions(images=32, batch_size=4)  # 8 batches
    progress, should_stop = stop_at_progress(3)
    run = Run(store=store, progress=progress, should_stop=should_stop, bootstrap=0)
    with pytest.raises(RunStopped, match="batch 4 of 8"):
        cka([tiny_vit], fmnist_source, opts, run)
    assert run.info.batches_computed == 3  # no forward after the stop was asked for
    assert run.info.forward_passes == {tiny_vit.label: 3}
    again = Run(store=store, bootstrap=0)
    cka([tiny_vit], fmnist_source, opts, again)
    assert (again.info.batches_from_cache, again.info.batches_computed) == (3, 5)


def test_stream_stops_before_the_second_models_forward(tiny_vit, tiny_resnet, fmnist_source, store):
    # checks: batch 1, its vit and resnet forwards; batch 2, its vit forward; then the stop before resnet's
    run = Run(store=store, should_stop=stop_after(5), bootstrap=0)
    with pytest.raises(RunStopped, match=f"{tiny_resnet.label}, batch 2 of 2"):
        cka([tiny_vit, tiny_resnet], fmnist_source, CKAOptions(images=8, batch_size=4), run)
    assert run.info.forward_passes == {tiny_vit.label: 2, tiny_resnet.label: 1}


def test_receptive_fields_stop_between_blocks_and_keep_done_blocks(tiny_vit, fmnist_source, store):
    opts = receptive.ReceptiveOptions(images=8, batch_size=4)
    blocks = len(receptive.block_names(tiny_vit))
    assert blocks >= 2
    run = Run(store=store, should_stop=stop_after(blocks + 1), bootstrap=0)  # the 2nd batch's 2nd block
    with pytest.raises(RunStopped, match=f"batch 2 of 2, blocks.1 \\(block 2 of {blocks}\\)"):
        receptive.receptive_fields(tiny_vit, fmnist_source, opts, run)
    again = Run(store=store, should_stop=stop_after(10**6), bootstrap=0)
    full = receptive.receptive_fields(tiny_vit, fmnist_source, opts, again)
    assert again.info.batches_from_cache == 1 and again.info.batches_computed == 1
    fresh = receptive.receptive_fields(tiny_vit, fmnist_source, opts, Run(bootstrap=0))
    assert full.maps == pytest.approx(fresh.maps, rel=1e-12)


def test_probe_fits_stop_between_layers(tiny_vit, fmnist_source):
    split = probes.few_shot_split(fmnist_source, shots=2, test=20)
    words = []

    def should_stop() -> bool:
        return any("probe fits" in w and "(2 of" in w for w in words)

    run = Run(progress=lambda d, t, text: words.append(text), should_stop=should_stop)
    with pytest.raises(RunStopped, match="probe fits"):
        probes.probe_model(tiny_vit, fmnist_source, split, reps=("cls",), draws=1, batch_size=8, run=run)
    passes = [w for w in words if w.startswith("pass ")]
    assert passes[0].startswith(f"pass 1 of 3: {tiny_vit.label}, training images: batch 1 of")
    assert any(w.startswith(f"pass 3 of 3: {tiny_vit.label}, test images: batch") for w in passes)


def test_attribution_stops_inside_an_image(tiny_vit, fmnist_source):
    words = []
    run = Run(progress=lambda d, t, text: words.append(text),
              should_stop=lambda: any("order 2 of" in w for w in words))
    opts = attribution.FaithfulnessOptions(methods=("rollout",), random_orders=3)
    with pytest.raises(RunStopped, match="random order 1"):
        attribution.attribution(tiny_vit, fmnist_source, 0, opts, run)
    assert words[0].startswith(f"{tiny_vit.label}: maps of 1 image (rollout)")
    assert words[1] == f"{tiny_vit.label}: image 1 of 1, deletion and insertion of rollout (order 1 of 4)"


def _page():
    """An app page whose run asks Streamlit to stop or rerun it (as a closed tab or a Cancel click does) once its
    bar reports batch 3: the page's engine run must stop there. Kept in session state: what each run computed."""
    import lab
    import streamlit as st
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    import vitlab
    from vitlab.engine.run import CKAOptions, cka

    m = lab.model("test_vit@random:0", "cpu")
    src = vitlab.open_source("fashion-mnist:test")
    runs = st.session_state.setdefault("runs", [])
    how = st.session_state["how"]

    def fn(run):
        mine = {"computed": 0, "cached": 0}
        runs.append(mine)
        draw = run.progress

        def progress(done, total, text):
            draw(done, total, text)
            if done == 2 and "batch" in text and len(runs) == 1:
                requests = get_script_run_ctx().script_requests
                # (statements, not an expression: Streamlit's magic would st.write an expression's value)
                if how == "stop":
                    requests.request_stop()
                else:
                    requests.request_rerun(RerunData())

        try:
            # each variant its own images: the cache is shared by the module's app tests
            opts = CKAOptions(images=32, batch_size=4, shuffle={"rerun": 1, "stop": 2}[how])
            return cka([m], src, opts, run.with_progress(progress))
        finally:
            mine["computed"], mine["cached"] = run.info.batches_computed, run.info.batches_from_cache

    report = lab.compute(("stops", how), fn, "Stops")
    st.write("done" if report is not None else "no result")


@pytest.mark.parametrize("how", ["rerun", "stop"])
def test_app_run_stops_on_a_rerun_or_stop_request(app_cache, how):
    at = AppTest.from_function(_page, default_timeout=300)
    at.session_state["how"] = how
    at.run()
    runs = at.session_state["runs"]
    assert runs[0] == {"computed": 2, "cached": 0}  # no batch computed after the request
    if how == "rerun":  # Cancel's rerun (here without the click: the page runs again) reads the 2 batches back
        assert runs[1] == {"computed": 6, "cached": 2}
        assert [m.value for m in at.markdown] == ["done"]
    else:  # a closed tab: the script run ends there
        assert len(runs) == 1
