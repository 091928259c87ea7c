"""Classical pipelines as tensors, fine-tuned end to end (neural translation; Hummingbird's GEMM trees).

* :mod:`.translate`: a pipeline's ONNX steps as one differentiable :class:`~.translate.PipelineNet`;
* :mod:`.trees`: tree ensembles as GEMM trees, hard (exact) or soft (differentiable thresholds);
* :mod:`.train`: joint fine-tuning with the original pipeline kept as a candidate chosen on validation.

No planner or catalog imports (``FINETUNE PIPELINE`` is :mod:`modelsql.engine.finetune.statement`).
"""
