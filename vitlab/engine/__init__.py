"""Engine: the one cached pass over models x images and what it needs.

    context      ``Run``: store, device, precision, progress, shard and reduce, handed to every analysis
    run          ``stream``: per batch, cached statistics or one forward with the union of taps; CKA of two models
    pipeline     input workers that decode and transform ahead of the forward pass
    inflight     a tap's statistic formed as soon as its activation exists, the activation released
    activations  small image sets' activations themselves, cached (the interactive views)
    hostmem      reuse of freed host memory during a CPU run
    dist         torchrun: ranks, shards, all-reduce of accumulators

It reads ``vitlab.inputs`` and ``vitlab.stats`` and knows no analysis (tests/test_layout.py checks it).
"""
