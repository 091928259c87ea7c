"""The clients: the PEP 249 connection and cursor (:mod:`.dbapi`), the ``modelsql`` shell and its
commands (:mod:`.cli`, :mod:`.cli_serve`, :mod:`.quickstart`) and how results are displayed (:mod:`.display`)."""
