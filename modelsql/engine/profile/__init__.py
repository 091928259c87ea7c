"""PROFILE and COMPILE: measuring model runs, the learned cost model trained from their traces
(Mantis), and compiling a model version with TVM."""
