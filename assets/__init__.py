"""The files vitlab bundles: the zoo's checkpoints and cards, the Fashion-MNIST test slice, the sample photos. A package
only so that the wheel carries them as ``vitlab._assets`` and an editable install maps that name onto this folder
(setup.py, vitlab.resources)."""
