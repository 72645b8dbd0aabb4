"""The private search: the tuner, its loop, the per-run record, storage (journals) and execution (executors).

The search core knows no DP-SGD: a run's privacy and its private score come from a
:class:`~dphypo.search.records.RunMechanism` that the training layer implements.
"""
