"""Statistics: pure per-batch kernels on arrays and the float64 accumulators that fold them.

No model, no file, no pass: each module takes arrays (or tensors) and returns arrays, and imports nothing of vitlab
but ``vitlab.errors`` (tests/test_layout.py checks it).

    cka          Gram matrices, unbiased HSIC (U-centred), the streaming minibatch CKA accumulator
    device_cka   the same folds on the model's device (CUDA/MPS), float64 where it matters
    measures     similarity measures beyond CKA (CCA family, Procrustes, RSA, ...) on feature matrices
    agreement    whether those measures agree about one pair of models
    evidence     intervals (bootstrap over batches or images), permutation nulls, references and verdicts
"""
