"""FINETUNE PIPELINE: a classical pipeline trained end to end (:mod:`modelsql.finetune` holds the
translation to torch)."""
