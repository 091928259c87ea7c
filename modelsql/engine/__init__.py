"""The engine: the statement loop (:mod:`.session`) and the handlers registry on top, then one package per
job: :mod:`.query` (the PREDICT planner), :mod:`.artifacts` (catalog version -> what runs it), and the
statement families :mod:`.models`, :mod:`.pipelines`, :mod:`.serve`, :mod:`.tune`, :mod:`.profile` and
:mod:`.finetune`."""
