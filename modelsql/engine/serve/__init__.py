"""SERVE, STOP SERVER and SHOW SERVERS: the catalog as a serving repository (:mod:`modelsql.serving`
serves it), its resident steps and the fused steps of pipelines that share them (PRETZEL)."""
