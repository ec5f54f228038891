"""The serving loop's kernels: the compiled replay of a whole loop (:mod:`.replay_kernel`, driven
by :mod:`.replay`) and the step API's kernels (:mod:`.steps`), per-request memory
(:mod:`.remembered`, its own index :mod:`.own_index`) and request store
(:mod:`.request_store`)."""
