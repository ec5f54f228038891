"""vLLM's side: its n-gram proposer and its replay (:mod:`.lookup`), trees cut to chains
(:mod:`.chains`), and its input batch's rows recognised (:mod:`.rows`)."""
