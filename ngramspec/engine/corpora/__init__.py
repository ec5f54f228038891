"""External corpora's kernels: the suffix automaton SGLang's corpora are matched in
(:mod:`.sam`), its build (:mod:`.automaton`) and the draft trees read from it
(:mod:`.corpus_tree`)."""
