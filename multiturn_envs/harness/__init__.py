"""The reference harness: rollouts (:mod:`.rollout`), records and resume (:mod:`.records`),
Pass@(K,T) metrics (:mod:`.passk`), analyses (:mod:`.analysis`) and reports (:mod:`.report`).

Import the submodules directly; this package imports nothing heavy on its own.
"""
