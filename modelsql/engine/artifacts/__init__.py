"""Artifacts: from a catalog model version to what runs it (ONNX Runtime sessions, compiled TVM
libraries, NetFuse-merged graphs, Python programs), and the trust model of code kept in a database."""
