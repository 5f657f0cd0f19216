"""Inputs: what a pass reads and where its results go, at the edge of the package.

    models        a timm model from a spec (pretrained, random, zoo, checkpoint), its transform and fingerprint
    taps          each family's named representation points (shapes beside them) and the hooks that capture them
    data          image sources (folders, uploads, Fashion-MNIST, CIFAR) and deterministic batching
    images        safe decoding of untrusted image files
    evaltransform the model's eval transform without torchvision's per-call dispatch
    fmnist        the bundled Fashion-MNIST slice
    hub           the Hugging Face hub cache, offline when it is unreachable
    cache         the disk store of per-batch statistics and activations (no pickles)
    outdir        an output folder: run.json, timings

Nothing here knows the pass (``vitlab.engine``) or any analysis (tests/test_layout.py checks it).
"""
