"""The prefetching input pipeline equals the serial path: same tensors, same skipped images, same order."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import vitlab
from vitlab import VitlabError, pipeline
from vitlab.engine.run import GramStatistic, stream
from vitlab.inputs.data import decode, folder_source, plan_batches, select

SAMPLES = vitlab.data.ASSETS / "samples"


@pytest.fixture()
def jpeg_folder(tmp_path):
    """Nine JPEGs of different sizes and modes (one greyscale), two unreadable files, in two class folders."""
    from PIL import Image

    files = sorted(SAMPLES.glob("*.jpg"))[:9]
    for k, f in enumerate(files):
        img = Image.open(f)
        img = img.convert("L") if k == 4 else img.convert("RGB")
        sub = tmp_path / ("a" if k % 2 else "b")
        sub.mkdir(exist_ok=True)
        img.resize((120 + 13 * k, 90 + 7 * k)).save(sub / f"img{k}.jpg", quality=90)
    (tmp_path / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (tmp_path / "b" / "empty.png").write_bytes(b"")
    return tmp_path


def _serial(source, batch, loaded):
    """The reference: decoded one by one, then the model's transform itself (not vitlab.evaltransform)."""
    decode(source, batch)
    mode = "L" if loaded.in_chans == 1 else "RGB"
    return batch, torch.stack([loaded.transform(img.convert(mode)) for img in batch.images])


@pytest.mark.parametrize("workers, kind", [(0, "threads"), (1, "threads"), (3, "threads"), (2, "processes")])
def test_prefetcher_equals_serial_decode_and_transform(jpeg_folder, tiny_vit, workers, kind):
    source = folder_source(jpeg_folder)
    batches = plan_batches(source, select(source), 4)
    with pipeline.Prefetcher(source, workers, kind=kind) as pf:
        futures = [pf.submit(b, pipeline.groups_of([tiny_vit])) for b in plan_batches(source, select(source), 4)]
        got = [f.result() for f in futures]
    key = pipeline.input_key(tiny_vit)
    skipped = []
    for b, p in zip(batches, got):
        ref, x = _serial(source, b, tiny_vit)
        assert p.batch.ids == ref.ids and p.batch.labels == ref.labels and p.batch.skipped == ref.skipped
        assert torch.equal(p.inputs[key], x)
        # the decoded images themselves come back too (localization re-reads them)
        assert [np.asarray(i).tolist() for i in p.batch.images] == [np.asarray(i).tolist() for i in ref.images]
        skipped += p.batch.skipped
    assert [s[0].split("/")[-1] for s in skipped] == ["broken.jpg", "empty.png"]
    assert all("broken.jpg" in s[1] or "empty.png" in s[1] for s in skipped)


def test_models_with_equal_transforms_share_one_input(tiny_vit, tiny_resnet):
    other_vit = vitlab.load("test_vit@random:1", "cpu")
    assert pipeline.input_key(other_vit) == pipeline.input_key(tiny_vit)
    assert len(pipeline.groups_of([tiny_vit, other_vit])) == 1
    # a different data config is a different input
    assert len(pipeline.groups_of([tiny_vit, tiny_resnet])) == len({pipeline.input_key(tiny_vit),
                                                                    pipeline.input_key(tiny_resnet)})


def test_prefetched_keeps_order_and_runs_ahead(jpeg_folder):
    source = folder_source(jpeg_folder)
    batches = plan_batches(source, select(source), 2)
    planned_at: list[int] = []
    consumed: list[int] = []

    def plan(batch):
        planned_at.append(len(consumed))
        return batch.index, ([] if batch.index % 2 else None)  # odd batches decode only, even ones need nothing

    with pipeline.Prefetcher(source, 2) as pf:
        for batch, planned, prepared in pipeline.prefetched(batches, plan, pf, depth=2):
            assert planned == batch.index
            assert (prepared is None) == (batch.index % 2 == 0)
            if prepared is not None:
                assert prepared.inputs == {} and prepared.batch.ids
            consumed.append(batch.index)
    assert consumed == [b.index for b in batches]
    # batch k is planned before batch k - 2 is consumed: two batches are in preparation ahead of the consumer
    assert planned_at[:4] == [0, 0, 0, 1]


def test_stream_with_workers_equals_serial_stream(jpeg_folder, tiny_vit, tiny_resnet):
    source = folder_source(jpeg_folder)
    idx = select(source)
    stats = [[GramStatistic()], [GramStatistic()]]

    def run(workers, kind=None):
        info = vitlab.RunInfo()
        out = [(b.ids, b.labels, b.skipped, [f["gram"]["grams"] for f in found])
               for b, found in stream([tiny_vit, tiny_resnet], source, idx, 5, stats,
                                      vitlab.Run(info=info, workers=workers, worker_kind=kind))]
        return out, info

    serial, info0 = run(0)
    for workers, kind in ((3, "threads"), (2, "processes")):
        threaded, info3 = run(workers, kind)
        assert len(serial) == len(threaded) == 2  # the 9 readable files of 11, in batches of 5 and 4
        for (ids0, lab0, sk0, g0), (ids3, lab3, sk3, g3) in zip(serial, threaded):
            assert ids0 == ids3 and lab0 == lab3 and sk0 == sk3
            for a, b in zip(g0, g3):
                np.testing.assert_array_equal(a, b)
        assert info0.skipped_images == info3.skipped_images and len(info0.skipped_images) == 2
        assert info0.dropped_batches == info3.dropped_batches == []  # batches are made of readable images


def test_worker_threads_leave_the_forward_its_threads(jpeg_folder, tiny_vit):
    before = torch.get_num_threads()
    seen = []
    source = folder_source(jpeg_folder)
    orig = pipeline._prepare_image

    def spy(*a):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return orig(*a)

    pipeline._prepare_image = spy
    try:
        with pipeline.Prefetcher(source, 2) as pf:
            pf.submit(plan_batches(source, select(source), 8)[0], pipeline.groups_of([tiny_vit])).result()
    finally:
        pipeline._prepare_image = orig
    assert seen and all(name.startswith("vitlab-input") and n == 1 for name, n in seen)
    assert torch.get_num_threads() == before


def test_workers_option_is_checked(monkeypatch):
    with pytest.raises(VitlabError, match="--workers must be a non-negative integer"):
        pipeline.check_workers("-1")
    with pytest.raises(VitlabError, match="--workers"):
        pipeline.check_workers("two")
    monkeypatch.setenv("VITLAB_WORKERS", "x")
    with pytest.raises(VitlabError, match="VITLAB_WORKERS must be a non-negative integer"):
        pipeline.default_workers()
    monkeypatch.setenv("VITLAB_WORKERS", "3")
    assert pipeline.default_workers() == 3
    pipeline.set_default_workers(5)
    try:
        assert pipeline.default_workers() == 5
    finally:
        pipeline.set_default_workers(None)
    monkeypatch.delenv("VITLAB_WORKERS")
    assert pipeline.default_workers() == min(pipeline.MAX_DEFAULT_WORKERS, pipeline.cores())
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * pipeline.cores()))  # torchrun: ranks share the cores
    assert pipeline.default_workers() == 1


def test_decoding_in_threads_leaves_the_warning_filters_as_they_were(jpeg_folder, monkeypatch):
    """Workers decode concurrently, so decoding must not swap the process-wide filter list in and out (a
    ``catch_warnings`` per image, left out of order, once left "ignore everything" behind). Pillow's own warnings
    about a file (here a decompression-bomb warning: Pillow's limit lowered below the image, vitlab's is not) stay
    silent, and a warning from anywhere else is still shown."""
    import warnings

    from PIL import Image

    from vitlab.inputs import images

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100 * 80)  # every sample image is over it
    source = folder_source(jpeg_folder)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        with pipeline.Prefetcher(source, 4) as pf:
            for _ in range(20):
                [pf.submit(b, {}) for b in plan_batches(source, select(source), 1)]
                pf.submit(plan_batches(source, select(source), 11)[0], {}).result()
        after = [f for f in warnings.filters if getattr(f[3], "pattern", f[3]) != images.PILLOW_WARNINGS]
        assert after == before
        assert len(warnings.filters) == len(before) + 1  # the Pillow filter, once
        assert [w for w in seen if issubclass(w.category, Image.DecompressionBombWarning)] == []
        warnings.warn("from vitlab's caller", UserWarning)
        assert [str(w.message) for w in seen] == ["from vitlab's caller"]


@pytest.mark.parametrize("n, workers", [(32, 2), (32, 1), (5, 3), (1, 4), (9, 16), (0, 2), (33, 8)])
def test_tasks_cover_the_batch_in_order_and_reach_every_worker(n, workers):
    indices = list(range(100, 100 + n))
    tasks = pipeline._tasks(indices, workers)
    assert [i for t in tasks for i in t] == indices
    assert all(1 <= len(t) <= pipeline.TASK_IMAGES for t in tasks)
    assert len(tasks) >= min(n, workers)  # a batch of at least W images reaches all W workers


@pytest.mark.parametrize("n, workers, ahead", [(32, 2, 1), (32, 16, 2), (256, 16, 2), (5, 3, 1), (0, 2, 1),
                                               (64, 1, 1), (33, 8, 2)])
def test_process_tasks_cover_the_batch_in_order_and_keep_every_worker_busy(n, workers, ahead):
    indices = list(range(100, 100 + n))
    tasks = pipeline._process_tasks(indices, workers, ahead)
    assert [i for t in tasks for i in t] == indices
    assert all(len(t) >= pipeline.TASK_IMAGES for t in tasks[:-1])  # few, large tasks: one hand-off each
    # ahead batches in flight give every worker a task, unless the images are too few for that
    assert ahead * len(tasks) >= min(workers, ahead * -(-n // pipeline.TASK_IMAGES))


# ---------------------------------------------------------------- worker processes


class _CrashingSource(vitlab.data.FilesSource):
    """Kills the worker process that decodes the file named ``crash``: a decoder that segfaults on a file."""

    def load(self, i, min_side=None):
        import os
        import signal

        if str(self.items[i]).endswith("img3.jpg") and _worker_process():
            os.kill(os.getpid(), signal.SIGKILL)
        return super().load(i, min_side)


def _worker_process() -> bool:
    import multiprocessing

    return multiprocessing.parent_process() is not None


def test_a_worker_process_that_dies_is_a_clear_error_naming_its_batch(jpeg_folder, tiny_vit):
    files = folder_source(jpeg_folder)
    source = _CrashingSource(files.items, name="crashing")
    batches = plan_batches(source, select(source), 4)
    crash = next(b for b in batches if any(str(source.items[i]).endswith("img3.jpg") for i in b.indices))
    with pipeline.Prefetcher(source, 2, kind="processes") as pf:
        futures = [pf.submit(b, pipeline.groups_of([tiny_vit])) for b in batches]
        with pytest.raises(VitlabError) as e:
            [f.result() for f in futures]
    text = str(e.value)
    assert f"batch {crash.index}" in text and "img3.jpg" in text and "stopped abruptly" in text
    # the same images in threads (no worker process to kill) come through
    with pipeline.Prefetcher(source, 2, kind="threads") as pf:
        assert pf.submit(crash, pipeline.groups_of([tiny_vit])).result().batch.ids


def test_worker_processes_do_not_rerun_the_main_script(tmp_path, jpeg_folder, monkeypatch):
    """Under Streamlit ``__main__`` is the app's script, which a spawned process would run again on start; the
    workers start with a bare ``__main__`` instead, and the real one is back afterwards."""
    import sys
    import types

    marker = tmp_path / "ran"
    script = tmp_path / "page.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('the main script ran in a worker')\n")
    page = types.ModuleType("__main__")
    page.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", page)
    source = folder_source(jpeg_folder)
    with pipeline.Prefetcher(source, 2, kind="processes") as pf:
        assert pf.submit(plan_batches(source, select(source), 4)[0], {}).result().batch.ids
    assert not marker.exists()
    assert sys.modules["__main__"] is page


def test_worker_kind_is_checked_and_an_unpicklable_source_is_named(jpeg_folder, monkeypatch):
    with pytest.raises(VitlabError, match="--worker-kind must be 'threads' or 'processes', not 'fibres'"):
        pipeline.check_kind("fibres")
    monkeypatch.setenv("VITLAB_WORKER_KIND", "fibres")
    with pytest.raises(VitlabError, match="VITLAB_WORKER_KIND must be 'threads' or 'processes', not 'fibres'"):
        pipeline.default_kind()
    from vitlab.cli import runner  # run.json still records it, as text, for a command that decoded nothing

    assert "VITLAB_WORKER_KIND must be" in runner._input_workers()["error"]
    monkeypatch.setenv("VITLAB_WORKER_KIND", "process")
    assert pipeline.default_kind() == "processes"
    monkeypatch.delenv("VITLAB_WORKER_KIND")
    assert pipeline.default_kind() == "threads"
    source = folder_source(jpeg_folder)
    source.name = "my folder"
    source.opener = lambda path: path  # a source holding a lambda cannot be pickled
    with pipeline.Prefetcher(source, 2, kind="processes") as pf:
        with pytest.raises(VitlabError, match=r"the images \(my folder\) cannot be sent to a worker process"):
            pf.submit(plan_batches(source, select(source), 4)[0], {})
